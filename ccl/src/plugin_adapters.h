// One adapter per older ABI version (NCCL's getNcclTuner_vN pattern): the
// host only ever works with the newest table, and each adapter fills one
// from an older plugin's.
#pragma once

#include <string>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::internal {

// A v2 table that serves a v1 plugin: entries whose signature did not change
// are the plugin's own pointers; the others go through trampolines that know
// `v1`. Throws LoadError when more v1 plugins are loaded than the adapter
// has slots for (a process loads a handful of backends at most).
const infiniCclPlugin_v2_t* AdaptV1(const infiniCclPlugin_v1_t* v1,
                                    const std::string& library_path);

}  // namespace infini::ccl::internal
