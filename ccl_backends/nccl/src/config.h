// A caller's infiniCclConfig_t, and the nccl vendor options chained to it,
// as NCCL's ncclConfig_t.
#pragma once

#include <nccl.h>

#include <string>
#include <string_view>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::nccl {

// What the plugin keeps of a caller's config.
struct CommOptions {
  bool blocking = true;  // UNDEF is blocking (the ABI's rule)
  bool allow_device_sharing = false;
  std::string name;      // comm_name; "" = none
  std::string net_name;  // vendor option net_name; "" = NCCL's choice
  // Every other field as NCCL takes it; unset ones stay NCCL_CONFIG_UNDEF_*
  // so that NCCL (and its NCCL_* variables) decide.
  ncclConfig_t nccl = NCCL_CONFIG_INITIALIZER;
};

// Reads `config` (NULL: all defaults) as far as its struct_size says its
// fields exist, and applies the vendor options whose backend is "nccl"
// (others, and extensions of unknown type, are skipped). An unknown key or a
// bad value fails with infiniCclInvalidUsage in one line naming the key, the
// value, what is expected and the known keys; a malformed chain with
// infiniCclInvalidArgument.
infiniCclResult_t ReadOptions(const infiniCclConfig_t* config, std::string_view call,
                              CommOptions* options);

// The ncclConfig_t for `options`, naming the communicator `name` (NCCL keeps
// that pointer for the communicator's lifetime: it must live as long) and
// pointing at options.net_name (NCCL copies it during the init call).
ncclConfig_t ToNcclConfig(const CommOptions& options, const std::string& name);

// "cga_cluster_size, min_ctas, ..." (for messages and docs).
std::string KnownVendorKeys();

}  // namespace infini::ccl::nccl
