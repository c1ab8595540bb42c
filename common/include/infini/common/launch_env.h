// The variables infini_run writes for its ranks and the ranks read, named
// once: the launcher (launch/src/child_env.cc), the rank layer
// (parallel/src/env_reader.cc, context.cc), the store's client and ccl/
// use these names. torchrun's, InfiniTrain's and the schedulers' own names
// (RANK, NPROC_PER_NODE, SLURM_PROCID, ...) are theirs and are spelled where
// they are read or written.
#pragma once

namespace infini::env {

inline constexpr const char* kBackend = "INFINI_CCL_BACKEND";   // --ccl_backend
inline constexpr const char* kRunId = "INFINI_RUN_ID";          // keys are namespaced by it
inline constexpr const char* kStoreAddr = "INFINI_STORE_ADDR";  // the launcher's store
inline constexpr const char* kStorePort = "INFINI_STORE_PORT";
inline constexpr const char* kRestartCount = "INFINI_RESTART_COUNT";  // attempts so far
inline constexpr const char* kRunToken = "INFINI_RUN_TOKEN";  // the run's secret, never printed
// "1": the devices a rank sees are its process's own (--isolate_devices).
inline constexpr const char* kDevicesIsolated = "INFINI_CCL_DEVICES_ISOLATED";

}  // namespace infini::env
