// The environment each rank gets (docs/launcher.md lists every variable).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace infini::launch {

// What every rank of one attempt shares.
struct WorldContext {
  int nnodes = 1;
  int processes_per_node = 1;
  int node_rank = 0;
  std::string run_id;
  std::string ccl_backend;
  std::string master_addr;  // for the program's own store (torch env://)
  uint16_t master_port = 0;
  std::string store_addr;  // the launcher's store
  uint16_t store_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  std::string role = "default";
  std::string run_token;  // empty: not set
  // Device isolation: VARIABLE=<device of local rank>; empty: none.
  std::string visibility_variable;
  std::vector<std::string> visible_devices;  // inherited list, else indices
  bool inherited_nccl_async_error_handling = false;
  bool shrink_on_failure = false;  // --on_failure=shrink: INFINI_ON_FAILURE=shrink
  // A replacement node joining a shrinking run: its join notice's number
  // (INFINI_JOINING; loss_notice.h, "Joins"), 0 for any other node. Such a
  // node's ranks are numbered as a node after every other: node_rank is its
  // block of launch ranks, nnodes counts every block given so far.
  int64_t join_notice = 0;
};

using EnvironmentVariables = std::vector<std::pair<std::string, std::string>>;

// The variables infini_run sets for local rank `local_rank`, in a fixed order.
// `inherited_omp_threads` is whether OMP_NUM_THREADS is already set.
EnvironmentVariables LauncherVariables(const WorldContext& world, int local_rank,
                                       bool inherited_omp_threads);

// The launcher's own environment with `overrides` set (they win), as
// "NAME=value" strings for execve.
std::vector<std::string> MergeEnvironment(char** inherited, const EnvironmentVariables& overrides);

}  // namespace infini::launch
