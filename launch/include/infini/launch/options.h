// What the user asked infini_run to do, parsed and validated.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "infini/common/one_line.h"

namespace infini::launch {

// A user's mistake on the command line: one line on stderr, exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failure while running (rendezvous, disagreement between nodes, a dead
// store): one line on stderr, exit code 1.
class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The launcher got SIGINT/SIGTERM/SIGHUP while it was not supervising ranks
// (e.g. waiting for other nodes): exit 128 + signal.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int signal) : std::runtime_error("interrupted"), signal_number(signal) {}
  int signal_number;
};

// torchrun's --tee/--redirects codes: bit 1 = stdout, bit 2 = stderr; either
// one code for every local rank or "local_rank:code,..." per rank.
struct StreamSelection {
  static constexpr int kStdout = 1;
  static constexpr int kStderr = 2;
  int default_code = 0;
  std::map<int, int> code_by_local_rank;

  int CodeFor(int local_rank) const;
};

struct LaunchOptions {
  int nnodes = 1;
  int processes_per_node = 1;
  int node_rank = -1;  // -1: assigned in join order
  // Where the launchers meet. Port 0 (single node only): a free port.
  std::string rendezvous_host = "127.0.0.1";
  uint16_t rendezvous_port = 0;
  // --rdzv_backend=etcd: the launchers meet through these etcd members
  // (host:port each) instead of a store on node 0.
  bool rendezvous_on_etcd = false;
  std::vector<std::string> etcd_endpoints;
  std::string run_id;
  bool run_id_given = false;
  std::chrono::milliseconds rendezvous_timeout{std::chrono::seconds(300)};
  // A node whose launcher sent no heartbeat this long is lost; also how long
  // a store call may take and a rank may stay stopped.
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(15)};
  // The run's secret: every store this launcher hosts or joins demands it;
  // ranks get it as INFINI_RUN_TOKEN. Empty: unauthenticated (multi-node
  // without a token: torchrun's trusted-network model, with a warning).
  std::string run_token;
  // --local_addr: the MASTER_ADDR node 0 publishes (default: the endpoint host).
  std::string local_addr;
  std::string role = "default";  // --role (ROLE_NAME)
  // --isolate_devices: each rank sees only its own device(s) through the
  // backend's visibility variable (empty: the backend has none).
  bool isolate_devices = false;
  std::string visibility_variable;
  std::vector<std::string> visible_devices;  // the launcher's own list, if set
  bool use_pid_namespace = true;
  std::string ccl_backend = "auto";
  int max_restarts = 0;
  std::chrono::milliseconds monitor_interval{100};
  std::chrono::milliseconds term_timeout{std::chrono::seconds(30)};
  std::string log_dir;  // empty: no log files
  StreamSelection redirects;
  StreamSelection tee;
  std::vector<int> local_ranks_filter;  // empty: every local rank on the console
  bool dry_run = false;
  // The program and its arguments; program_argv[0] as the user wrote it,
  // program_path the executable found (PATH lookup, X_OK checked).
  std::vector<std::string> program_argv;
  std::string program_path;

  bool multi_node() const { return nnodes > 1; }
  bool ShowsOnConsole(int local_rank) const;
};

// Values echoed in messages are escaped with infini::OneLine
// (infini/common/one_line.h), the one definition every layer shares.
using ::infini::OneLine;

// Parses infini_run's command line (both spellings of every flag, `--` or the
// first non-flag word starts the program). Throws UsageError. Returns false
// when --help was asked for (the usage was printed).
bool ParseLaunchCommandLine(int argc, char** argv, LaunchOptions* options);

// Folder holding the running infini_run (to find ccl_info beside it).
std::string ExecutableDirectory();

}  // namespace infini::launch
