// The environment each rank gets (docs/launcher.md lists every variable):
// one value, computed by one function from the options, this node's place in
// the attempt and the launcher's own environment, used both to start the
// ranks and by --dry_run. The launcher never sets a variable on itself for
// its ranks to inherit.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "infini/common/rank_layout.h"
#include "infini/launch/options.h"

namespace infini::launch {

// Where this node's ranks meet in one attempt: from the rendezvous for a
// real start, made up from the options for --dry_run.
struct NodePlacement {
  int node_rank = 0;
  int nnodes = 1;           // this round's (elastic runs: between MIN and MAX)
  std::string master_addr;  // the program's own store (MASTER_ADDR:MASTER_PORT)
  uint16_t master_port = 0;
  std::string store_addr;  // the ranks' store (the node's relay, or the launcher's)
  uint16_t store_port = 0;
};

// What every rank of one attempt shares.
struct WorldContext {
  // A replacement node joining a shrinking run (join_notice > 0) is
  // numbered as a node after every other: node_rank is its block of launch
  // ranks, nnodes counts every block given so far.
  RankLayout layout;
  std::string run_id;
  std::string ccl_backend;
  std::string device_backend;  // INFINI_CCL_DEVICE_BACKEND; empty: not set
  std::string master_addr;     // for the program's own store (torch env://)
  uint16_t master_port = 0;
  std::string store_addr;  // the launcher's store
  uint16_t store_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  std::string role = "default";
  std::string run_token;  // empty: not set
  std::string trace_dir;  // absolute; empty: no trace
  // Device isolation: VARIABLE=<device of local rank>; empty: none.
  std::string visibility_variable;
  std::vector<std::string> visible_devices;  // inherited list, else indices
  // What the launcher inherited decides two defaults (torchrun's).
  bool inherited_omp_threads = false;
  bool inherited_nccl_async_error_handling = false;
  bool shrink_on_failure = false;  // --on_failure=shrink: INFINI_ON_FAILURE=shrink
  // A replacement node's join notice's number (INFINI_JOINING; loss_notice.h,
  // "Joins"), 0 for any other node.
  int64_t join_notice = 0;
};

// The world of attempt `attempt`: from the options, this node's placement
// and the launcher's environment (`environment`: NAME=value entries,
// null-terminated; main passes environ).
WorldContext MakeWorld(const LaunchOptions& options, const NodePlacement& placement, int attempt,
                       char* const* environment);

using EnvironmentVariables = std::vector<std::pair<std::string, std::string>>;

// The variables infini_run sets for local rank `local_rank`, in a fixed order.
EnvironmentVariables LauncherVariables(const WorldContext& world, int local_rank);

// The launcher's own environment with `overrides` set (they win), as
// "NAME=value" strings for execve.
std::vector<std::string> MergeEnvironment(char* const* inherited,
                                          const EnvironmentVariables& overrides);

// --dry_run's text: per rank of this node its variables (LauncherVariables
// of the world MakeWorld builds, the secret shown as "(secret)") and its
// command. Several nodes: the endpoint stands for node 0's store and
// MASTER_PORT is 0 (node 0 picks it at launch); one node: free local ports.
std::string DryRunText(const LaunchOptions& options, char* const* environment);

}  // namespace infini::launch
