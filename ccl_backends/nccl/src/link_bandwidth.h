// get_link_bandwidth: the peak per-direction bandwidth between a GPU and
// its peers, read through NVML (libnvidia-ml.so.1, opened at call time so
// the plugin has no link-time dependency on it).
#pragma once

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::nccl {

// Active NVLinks × the per-link rate of their NVLink version, else the
// PCIe generation × width; peak_GBps = 0 and the reason in `kind` when NVML
// is absent or cannot tell.
infiniCclResult_t GetLinkBandwidth(int device, infiniCclLinkBandwidth_t* link);

}  // namespace infini::ccl::nccl
