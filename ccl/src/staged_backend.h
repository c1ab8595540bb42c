// A host-staged backend: one plugin's collectives on host buffers (the
// transport, e.g. gloo) over another plugin's device memory, streams and
// events (the device, e.g. nccl, whose communicator entries are never
// called). The host makes it when INFINI_CCL_DEVICE_BACKEND (infini_run
// --device_backend) names a device plugin; ccl::, parallel/, conformance
// and benchmarks then see one current-version table, as for any plugin.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "infini/ccl/ccl.h"
#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::internal {

// The table that stages `transport`'s collectives through `device`'s
// runtime. Both tables outlive the process (plugins are never unloaded).
// A process composes one pair: a second, different pair throws LoadError.
// Throws LoadError when the transport's buffers are not host memory or it
// cannot create a rank with comm_init_rank.
const infiniCclPlugin_t* ComposeStaged(const infiniCclPlugin_t* transport,
                                       const infiniCclPlugin_t* device);

// "gloo+nccl": the staged backend's name in messages and ccl_info.
std::string StagedName(const infiniCclPlugin_t& transport, const infiniCclPlugin_t& device);

// The Backend of `transport` staged through `device`: the device's
// description and runtime, the transport's communicators and identity.
// Throws LoadError naming --device_backend when `device` is a host backend.
std::shared_ptr<const Backend> MakeStagedBackend(const Backend& transport, const Backend& device);

// How this process stages, from INFINI_CCL_DEVICE_BACKEND's entry for its
// LOCAL_RANK (infini/common/device_backend_choice.h; 0 when unset).
struct RankStaging {
  std::string device;  // the device backend; "" for none (unset, or `none`)
  // `none` while another local rank names a device: a host rank of a mixed
  // job, whose collectives must go in the same chunks as the staged ranks'
  // (the transport matches calls one for one).
  bool host_in_mixed_job = false;
};
// Throws LoadError naming the variable for a bad spelling.
RankStaging StagingOfThisRank();

// `transport` staged through its own host runtime: the same chunks as a
// staged rank's, for a host rank of a mixed job. Named "TRANSPORT+host".
std::shared_ptr<const Backend> MakeHostStagedBackend(const Backend& transport);

}  // namespace infini::ccl::internal
