// What the nccl backend declares it can do (infiniCclPlugin_v2_t.features
// and supports()).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::nccl {

// Non-blocking communicators (ncclConfig_t.blocking = 0), ranks of one
// process created by concurrent threads, and ncclCommAbort releasing a
// blocked collective. Not DEVICE_SHARING: NCCL refuses two ranks on one GPU.
inline constexpr uint64_t kFeatures = INFINI_CCL_FEATURE_NONBLOCKING |
                                      INFINI_CCL_FEATURE_CONCURRENT_INIT |
                                      INFINI_CCL_FEATURE_ABORT_UNBLOCKS;

// Reductions (infiniCclCollectiveReduces: all_reduce, reduce, reduce_scatter,
// reduce_scatter_v): the types and operators NCCL reduces (types.h:
// Reducible). Data movement: any type of a whole number of bytes. Barrier:
// always. A collective newer than this plugin's header: no.
int Supports(infiniCclCollective_t collective, DLDataType datatype, infiniCclRedOp_t op);

}  // namespace infini::ccl::nccl
