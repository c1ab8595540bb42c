// Entries of newer NCCL releases, looked up in the libnccl loaded at run
// time rather than linked: a plugin built against a newer header may run
// on an older library.
#pragma once

namespace infini::ccl::nccl {

// `name` from the libnccl this plugin runs with, when that library is at
// least `version` (NCCL_VERSION_CODE); NULL otherwise.
void* NcclSymbol(const char* name, int version);

}  // namespace infini::ccl::nccl
