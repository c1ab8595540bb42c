// The variables infini_run writes for its ranks and the ranks read, named
// once: the launcher (launch/src/child_env.cc), the rank layer
// (parallel/src/env_reader.cc, context.cc), the store's client, ccl/ and the
// backends use these names. Our own are in infini::env; torchrun's and
// InfiniTrain's (which infini_run also writes, so that programs written for
// them run unchanged) in their own namespaces. The schedulers' names
// (SLURM_PROCID, PMI_RANK, OMPI_COMM_WORLD_RANK, ...) are only read, by
// parallel/'s reader, and are spelled there.
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
// "shrink": infini_run --on_failure=shrink; a lost rank is published
// (infini/common/loss_notice.h) and the others go on. Unset: restart.
inline constexpr const char* kOnFailure = "INFINI_ON_FAILURE";
inline constexpr const char* kOnFailureShrink = "shrink";
// Set on the ranks of a node that joins a shrinking run while it goes on:
// the number of its join notice (infini/common/loss_notice.h). Such a rank
// is not in the world until the survivors admit it.
inline constexpr const char* kJoining = "INFINI_JOINING";
// infini_run --device_backend: the plugin whose device buffers, streams and
// events a host backend's collectives are staged through (ccl/'s staged backend).
inline constexpr const char* kDeviceBackend = "INFINI_CCL_DEVICE_BACKEND";

// torchrun's (torch.distributed.run) variables, with its meanings.
namespace torchrun {
inline constexpr const char* kRank = "RANK";                        // global process rank
inline constexpr const char* kLocalRank = "LOCAL_RANK";             // process rank on its node
inline constexpr const char* kWorldSize = "WORLD_SIZE";             // processes in the run
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";  // processes per node
inline constexpr const char* kGroupRank = "GROUP_RANK";             // the node's rank
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";  // nodes
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleName = "ROLE_NAME";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
inline constexpr const char* kRunId = "TORCHELASTIC_RUN_ID";
inline constexpr const char* kRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr const char* kNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";
}  // namespace torchrun

// InfiniTrain's variables (its launcher's spelling of the same facts).
namespace infinitrain {
inline constexpr const char* kNnodes = "NNODES";
inline constexpr const char* kProcessesPerNode = "NPROC_PER_NODE";
inline constexpr const char* kGlobalProcessRank = "GLOBAL_PROC_RANK";
inline constexpr const char* kLocalProcessRank = "LOCAL_PROC_RANK";
inline constexpr const char* kProcessWorldSize = "PROC_WORLD_SIZE";
}  // namespace infinitrain

}  // namespace infini::env
