#include "infini/launch/child_env.h"

#include <cstring>
#include <set>

#include "infini/common/launch_env.h"

namespace infini::launch {

EnvironmentVariables LauncherVariables(const WorldContext& world, int local_rank,
                                       bool inherited_omp_threads) {
  const int global_rank = world.node_rank * world.processes_per_node + local_rank;
  const int world_size = world.nnodes * world.processes_per_node;
  const std::string restart_count = std::to_string(world.restart_count);
  namespace torchrun = env::torchrun;
  namespace infinitrain = env::infinitrain;
  EnvironmentVariables variables = {
      // torchrun's names
      {torchrun::kRank, std::to_string(global_rank)},
      {torchrun::kLocalRank, std::to_string(local_rank)},
      {torchrun::kWorldSize, std::to_string(world_size)},
      {torchrun::kLocalWorldSize, std::to_string(world.processes_per_node)},
      {torchrun::kGroupRank, std::to_string(world.node_rank)},
      {torchrun::kMasterAddr, world.master_addr},
      {torchrun::kMasterPort, std::to_string(world.master_port)},
      {torchrun::kRunId, world.run_id},
      {torchrun::kRestartCount, restart_count},
      // InfiniTrain's names
      {infinitrain::kNnodes, std::to_string(world.nnodes)},
      {infinitrain::kProcessesPerNode, std::to_string(world.processes_per_node)},
      {infinitrain::kGlobalProcessRank, std::to_string(global_rank)},
      {infinitrain::kLocalProcessRank, std::to_string(local_rank)},
      {infinitrain::kProcessWorldSize, std::to_string(world_size)},
      // ours
      {env::kBackend, world.ccl_backend},
      {env::kRunId, world.run_id},
      {env::kStoreAddr, world.store_addr},
      {env::kStorePort, std::to_string(world.store_port)},
      {env::kRestartCount, restart_count},
      // torchrun's agent variables
      {torchrun::kRoleRank, std::to_string(global_rank)},
      {torchrun::kRoleName, world.role},
      {torchrun::kRoleWorldSize, std::to_string(world_size)},
      {torchrun::kGroupWorldSize, std::to_string(world.nnodes)},
      {torchrun::kMaxRestarts, std::to_string(world.max_restarts)},
      // MASTER_PORT is free for the program's own store (torchrun's
      // TORCHELASTIC_USE_AGENT_STORE=False case).
      {torchrun::kUseAgentStore, "False"},
  };
  if (!world.inherited_nccl_async_error_handling) {
    variables.emplace_back(torchrun::kNcclAsyncErrorHandling, "1");  // torchrun's default
  }
  if (!world.run_token.empty()) variables.emplace_back(env::kRunToken, world.run_token);
  if (world.shrink_on_failure) variables.emplace_back(env::kOnFailure, env::kOnFailureShrink);
  if (world.join_notice > 0) {
    variables.emplace_back(env::kJoining, std::to_string(world.join_notice));
  }
  if (!world.visibility_variable.empty()) {
    const size_t index = static_cast<size_t>(local_rank);
    variables.emplace_back(world.visibility_variable, index < world.visible_devices.size()
                                                          ? world.visible_devices[index]
                                                          : std::to_string(local_rank));
    // Tells parallel/ that the devices it sees are this process's own, so a
    // rank takes its thread's device among them, not its node-wide index.
    variables.emplace_back(env::kDevicesIsolated, "1");
  }
  // torchrun: one OpenMP thread per rank unless the user chose, so that
  // several ranks do not oversubscribe the CPUs.
  if (!inherited_omp_threads && world.processes_per_node > 1) {
    variables.emplace_back(torchrun::kOmpNumThreads, "1");
  }
  return variables;
}

std::vector<std::string> MergeEnvironment(char** inherited, const EnvironmentVariables& overrides) {
  std::set<std::string> overridden;
  for (const auto& [name, value] : overrides) overridden.insert(name);
  std::vector<std::string> merged;
  for (char** entry = inherited; entry && *entry; ++entry) {
    const char* equals = strchr(*entry, '=');
    std::string name =
        equals ? std::string(*entry, static_cast<size_t>(equals - *entry)) : std::string(*entry);
    if (!overridden.count(name)) merged.emplace_back(*entry);
  }
  for (const auto& [name, value] : overrides) merged.push_back(name + "=" + value);
  return merged;
}

}  // namespace infini::launch
