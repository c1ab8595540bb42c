// What the user asked infini_run to do: parsed from argv alone
// (ParseLaunchCommandLine, command_line.cc), then completed from the machine
// (ResolveLaunchOptions, resolve_options.cc).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "infini/common/one_line.h"
#include "infini/common/rank_layout.h"

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

// Fields marked "resolved" are set by ResolveLaunchOptions; the parser
// leaves them at their defaults. The defaults written here are also the
// flags' (--nnodes, --nproc_per_node, --rdzv_timeout, --max_restarts,
// --min_ranks, --monitor_interval, --term_timeout, --role, --redirects,
// --tee): flag_definitions.cc's table reads them from a LaunchOptions.
struct LaunchOptions {
  // --nnodes=N, or torchrun's MIN:MAX: nnodes is the most (MAX), min_nnodes
  // the fewest a round may start with (MIN; 0: unset, the same as nnodes).
  int nnodes = 1;
  int min_nnodes = 0;
  // --nproc_per_node as given: a number, or gpu, cpu, auto. The parser sets
  // processes_per_node for a number and 0 for the others (resolved).
  std::string processes_per_node_spec = "1";
  int processes_per_node = 1;
  int node_rank = -1;  // -1: assigned in join order
  // Where the launchers meet. Port 0 (single node only): a free port.
  std::string rendezvous_host = "127.0.0.1";
  uint16_t rendezvous_port = 0;
  // The flags that named them, for messages: the user may never have
  // written --rdzv_endpoint (torch.distributed.launch's --master_addr form).
  std::string rendezvous_flags = "--rdzv_endpoint";
  // --rdzv_backend=etcd: the launchers meet through these etcd members
  // (host:port each) instead of a store on node 0.
  bool rendezvous_on_etcd = false;
  std::vector<std::string> etcd_endpoints;
  // --rdzv_id, or derived from the endpoint (torchrun's static form); empty
  // after parsing otherwise (resolved: generated from host, pid, random).
  std::string run_id;
  bool run_id_given = false;
  std::chrono::milliseconds rendezvous_timeout{std::chrono::seconds(300)};
  // Elastic rounds (torchrun's last_call_timeout): once MIN nodes joined, how
  // long a round waits for more, up to MAX.
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  // A node whose launcher sent no heartbeat this long is lost; also how long
  // a store call may take and a rank may stay stopped.
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(15)};
  // A launcher waiting for other nodes says whom it waits for after
  // FirstWaitingNote(), then every waiting_note_interval (resolved:
  // INFINI_RUN_WAITING_NOTE_S, for tests; torchrun users see 30 s).
  std::chrono::milliseconds waiting_note_interval{std::chrono::seconds(30)};
  std::chrono::milliseconds FirstWaitingNote() const {
    return std::min<std::chrono::milliseconds>(waiting_note_interval, std::chrono::seconds(5));
  }
  // --rdzv_conf=relay=0|1: on a multi-node run each launcher relays the
  // run's store for its ranks (docs/rendezvous.md, "Relay").
  bool relay_store = true;
  // --rdzv_conf=relay_log=PATH: the relay appends there each call it makes
  // upstream and, at the end, its counts (for tests and measurements).
  std::string relay_log_path;
  // The run's secret (resolved: from run_token_file, else INFINI_RUN_TOKEN,
  // else a new one for a single node): every store this launcher hosts or
  // joins demands it; ranks get it as INFINI_RUN_TOKEN. Empty:
  // unauthenticated (multi-node without a token: torchrun's trusted-network
  // model, with a warning).
  std::string run_token;
  std::string run_token_file;  // --rdzv_conf=token_file=PATH
  // --local_addr: the MASTER_ADDR node 0 publishes (default: the endpoint host).
  std::string local_addr;
  std::string role = "default";  // --role (ROLE_NAME)
  // --isolate_devices: each rank sees only its own device(s) through the
  // backend's visibility variable (resolved; empty: the backend has none).
  bool isolate_devices = false;
  std::string visibility_variable;
  std::vector<std::string> visible_devices;  // the launcher's own list, if set (resolved)
  bool use_pid_namespace = true;             // resolved: INFINI_RUN_PID_NAMESPACE=0 turns it off
  // --ccl_backend; empty after parsing when not given (resolved:
  // INFINI_CCL_BACKEND, else auto).
  std::string ccl_backend = "auto";
  // --device_backend, else INFINI_CCL_DEVICE_BACKEND (resolved; empty: none).
  std::string device_backend;
  int max_restarts = 0;
  // --on_failure=shrink: a lost rank is published, the others go on.
  bool shrink_on_failure = false;
  int min_ranks = 1;  // --min_ranks: fewer ranks left than this stops the run
  std::chrono::milliseconds monitor_interval{100};
  std::chrono::milliseconds term_timeout{std::chrono::seconds(30)};
  std::string log_dir;  // empty: no log files (resolved: a private default when --tee/--redirects)
  StreamSelection redirects;
  StreamSelection tee;
  std::vector<int> local_ranks_filter;  // empty: every local rank on the console
  std::string trace_dir;                // --trace_dir: empty, no trace (docs/tracing.md)
  bool comm_summary = false;            // --comm_summary: the table at the end (needs trace_dir)
  bool dry_run = false;
  // --dump_stacks[=RUN_ID]: start nothing; ask a live run's launcher for its
  // ranks' stacks (live_stacks.h). An empty id: the one run here.
  bool dump_stacks = false;
  std::string dump_stacks_run_id;
  // The program and its arguments; program_argv[0] as the user wrote it
  // (resolved: python3 -u [-m] put before a Python program), program_path
  // the executable found (resolved: PATH lookup, X_OK checked).
  std::vector<std::string> program_argv;
  std::string program_path;
  bool python_module = false;    // --module (-m)
  bool python_run_path = false;  // --run_path
  bool no_python = false;        // --no_python
  // Lines said once at start (e.g. a flag accepted and ignored, as torchrun).
  std::vector<std::string> notes;

  bool multi_node() const { return nnodes > 1; }
  // The world as launched: --nnodes at its most (elastic: MAX), before any
  // loss; this node's rank, 0 while it is assigned at join.
  RankLayout layout() const { return {nnodes, processes_per_node, std::max(node_rank, 0)}; }
  // --nnodes=MIN:MAX with MIN < MAX: node ranks and the world are agreed
  // each round, and a lost or late node makes the run meet again.
  bool elastic() const { return min_nnodes > 0 && min_nnodes < nnodes; }
  // --nnodes as the nodes agree on it: "N", or "MIN:MAX".
  std::string NnodesText() const {
    return elastic() ? std::to_string(min_nnodes) + ":" + std::to_string(nnodes)
                     : std::to_string(nnodes);
  }
  bool ShowsOnConsole(int local_rank) const;
  // --tee or --redirects sends some stream to the log files.
  bool WantsLogFiles() const;
};

// Values echoed in messages are escaped with infini::OneLine
// (infini/common/one_line.h), the one definition every layer shares.
using ::infini::OneLine;

// Parses infini_run's command line (both spellings of every flag, `--` or the
// first non-flag word starts the program) from argv and, when given,
// `environment` (NAME=value entries, null-terminated: main passes environ),
// of which only torchrun's PET_<FLAG> defaults are read; no process or file.
// Throws UsageError. Returns false when --help was asked for (print
// LaunchUsage()).
bool ParseLaunchCommandLine(int argc, char** argv, LaunchOptions* options,
                            char* const* environment = nullptr);

// infini_run's --help text (infini/common/usage.h's format).
std::string LaunchUsage();

// Completes parsed options from the machine: the backend from
// INFINI_CCL_BACKEND, the run id, the secret (token file or environment),
// the process count of gpu/cpu/auto (running bin/ccl_info), device
// isolation, the default log folder and the program's path. Throws
// UsageError (one line, exit 2).
void ResolveLaunchOptions(LaunchOptions* options);

// Folder holding the running infini_run (to find ccl_info beside it).
std::string ExecutableDirectory();

}  // namespace infini::launch
