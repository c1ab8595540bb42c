#include "infini/launch/child_env.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "infini/common/launch_env.h"
#include "infini/common/trace_format.h"
#include "infini/launch/net_util.h"
#include "infini/launch/trace_files.h"

namespace infini::launch {
namespace {

bool IsSetIn(char* const* environment, const char* name) {
  const size_t length = strlen(name);
  for (char* const* entry = environment; entry && *entry; ++entry) {
    if (strncmp(*entry, name, length) == 0 && (*entry)[length] == '=') return true;
  }
  return false;
}

std::string ShellQuoted(const std::string& word) {
  if (!word.empty() && word.find_first_of(" \t\n'\"\\$`*?[]{}()<>|&;!#~") == std::string::npos) {
    return OneLine(word);
  }
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return OneLine(quoted + "'");
}

// --dry_run's placement: the rendezvous endpoint for several nodes (node 0's
// MASTER_PORT is picked at launch), free local ports for one.
NodePlacement DryRunPlacement(const LaunchOptions& options) {
  NodePlacement placement;
  placement.node_rank = std::max(options.node_rank, 0);
  placement.nnodes = options.nnodes;
  if (options.multi_node()) {
    placement.master_addr = placement.store_addr = options.rendezvous_host;
    placement.store_port = options.rendezvous_port;
  } else {
    placement.master_addr = placement.store_addr = "127.0.0.1";
    placement.master_port = PickFreePort("127.0.0.1");
    placement.store_port =
        options.rendezvous_port ? options.rendezvous_port : PickFreePort("127.0.0.1");
  }
  return placement;
}

}  // namespace

WorldContext MakeWorld(const LaunchOptions& options, const NodePlacement& placement, int attempt,
                       char* const* environment) {
  WorldContext world;
  world.layout.nnodes = placement.nnodes;
  world.layout.processes_per_node = options.processes_per_node;
  world.layout.node_rank = placement.node_rank;
  world.run_id = options.run_id;
  world.ccl_backend = options.ccl_backend;
  world.device_backend = options.device_backend;
  world.master_addr = placement.master_addr;
  world.master_port = placement.master_port;
  world.store_addr = placement.store_addr;
  world.store_port = placement.store_port;
  world.restart_count = attempt;
  world.max_restarts = options.max_restarts;
  world.role = options.role;
  world.run_token = options.run_token;
  if (!options.trace_dir.empty()) world.trace_dir = AbsoluteTraceFolder(options.trace_dir);
  world.visibility_variable = options.visibility_variable;
  world.visible_devices = options.visible_devices;
  world.inherited_omp_threads = IsSetIn(environment, "OMP_NUM_THREADS");
  world.inherited_nccl_async_error_handling =
      IsSetIn(environment, env::torchrun::kNcclAsyncErrorHandling);
  world.shrink_on_failure = options.shrink_on_failure;
  return world;
}

EnvironmentVariables LauncherVariables(const WorldContext& world, int local_rank) {
  const RankLayout& layout = world.layout;
  const std::string global_rank = std::to_string(layout.GlobalRank(local_rank));
  const std::string world_size = std::to_string(layout.world_size());
  const std::string restart_count = std::to_string(world.restart_count);
  namespace torchrun = env::torchrun;
  namespace infinitrain = env::infinitrain;
  EnvironmentVariables variables = {
      // torchrun's names
      {torchrun::kRank, global_rank},
      {torchrun::kLocalRank, std::to_string(local_rank)},
      {torchrun::kWorldSize, world_size},
      {torchrun::kLocalWorldSize, std::to_string(layout.processes_per_node)},
      {torchrun::kGroupRank, std::to_string(layout.node_rank)},
      {torchrun::kMasterAddr, world.master_addr},
      {torchrun::kMasterPort, std::to_string(world.master_port)},
      {torchrun::kRunId, world.run_id},
      {torchrun::kRestartCount, restart_count},
      // InfiniTrain's names
      {infinitrain::kNnodes, std::to_string(layout.nnodes)},
      {infinitrain::kProcessesPerNode, std::to_string(layout.processes_per_node)},
      {infinitrain::kGlobalProcessRank, global_rank},
      {infinitrain::kLocalProcessRank, std::to_string(local_rank)},
      {infinitrain::kProcessWorldSize, world_size},
      // ours
      {env::kBackend, world.ccl_backend},
      {env::kRunId, world.run_id},
      {env::kStoreAddr, world.store_addr},
      {env::kStorePort, std::to_string(world.store_port)},
      {env::kRestartCount, restart_count},
      // torchrun's agent variables
      {torchrun::kRoleRank, global_rank},
      {torchrun::kRoleName, world.role},
      {torchrun::kRoleWorldSize, world_size},
      {torchrun::kGroupWorldSize, std::to_string(layout.nnodes)},
      {torchrun::kMaxRestarts, std::to_string(world.max_restarts)},
      // MASTER_PORT is free for the program's own store (torchrun's
      // TORCHELASTIC_USE_AGENT_STORE=False case).
      {torchrun::kUseAgentStore, "False"},
  };
  if (!world.inherited_nccl_async_error_handling) {
    variables.emplace_back(torchrun::kNcclAsyncErrorHandling, "1");  // torchrun's default
  }
  if (!world.device_backend.empty())
    variables.emplace_back(env::kDeviceBackend, world.device_backend);
  if (!world.run_token.empty()) variables.emplace_back(env::kRunToken, world.run_token);
  if (world.shrink_on_failure) variables.emplace_back(env::kOnFailure, env::kOnFailureShrink);
  if (world.join_notice > 0) {
    variables.emplace_back(env::kJoining, std::to_string(world.join_notice));
  }
  if (!world.trace_dir.empty()) {
    variables.emplace_back(trace_format::kTraceDirVariable, world.trace_dir);
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
  if (!world.inherited_omp_threads && layout.processes_per_node > 1) {
    variables.emplace_back(torchrun::kOmpNumThreads, "1");
  }
  return variables;
}

std::vector<std::string> MergeEnvironment(char* const* inherited,
                                          const EnvironmentVariables& overrides) {
  std::set<std::string> overridden;
  for (const auto& [name, value] : overrides) overridden.insert(name);
  std::vector<std::string> merged;
  for (char* const* entry = inherited; entry && *entry; ++entry) {
    const char* equals = strchr(*entry, '=');
    std::string name =
        equals ? std::string(*entry, static_cast<size_t>(equals - *entry)) : std::string(*entry);
    if (!overridden.count(name)) merged.emplace_back(*entry);
  }
  for (const auto& [name, value] : overrides) merged.push_back(name + "=" + value);
  return merged;
}

std::string DryRunText(const LaunchOptions& options, char* const* environment) {
  WorldContext world = MakeWorld(options, DryRunPlacement(options), 0, environment);
  if (!world.run_token.empty()) world.run_token = "(secret)";  // never printed
  std::string text;
  if (options.multi_node()) {
    text += "# multi-node: MASTER_PORT is picked by node 0 at launch (shown as 0)";
    if (options.node_rank < 0) text += "; node rank assigned at join (shown as 0)";
    if (options.elastic()) text += "; elastic: the world is each round's (shown at MAX)";
    text += "\n";
  }
  for (int local_rank = 0; local_rank < options.processes_per_node; ++local_rank) {
    text += "rank " + std::to_string(world.layout.GlobalRank(local_rank)) + " (local rank " +
            std::to_string(local_rank) + "):\n";
    for (const auto& [name, value] : LauncherVariables(world, local_rank)) {
      text += "  " + name + "=" + ShellQuoted(value) + "\n";
    }
    text += "  command: " + ShellQuoted(options.program_path);
    for (size_t i = 1; i < options.program_argv.size(); ++i) {
      text += " " + ShellQuoted(options.program_argv[i]);
    }
    text += "\n";
  }
  return text;
}

}  // namespace infini::launch
