// Starts one attempt's ranks on this node and watches them until they all
// exit, the first one fails, the launcher is signalled, or the other nodes
// ask it to stop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "infini/launch/output_pump.h"
#include "infini/launch/stack_dump.h"

namespace infini::launch {

struct RankSpec {
  int local_rank = 0;
  int global_rank = 0;
  std::string program_path;
  std::vector<std::string> argv;
  std::vector<std::string> environment;  // "NAME=value"
  RankOutputOptions output;
  // The rank's log folder (stdout.log, stderr.log; stacks.log is written
  // there); empty without --log_dir.
  std::string log_folder;
};

// How one rank ended.
struct RankExit {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = -1;
  // What its getpid() says when it runs in the ranks' PID namespace (and
  // what it prints); -1 otherwise. Summaries name both.
  pid_t namespace_pid = -1;
  bool spawn_failed = false;  // fork or exec failed; `detail` says why
  bool exited = false;        // else killed by `signal_number`
  int exit_code = 0;
  int signal_number = 0;
  bool stopped_by_launcher = false;  // it was still running at teardown
  int stalled_by_signal = 0;         // it stayed stopped (SIGSTOP...) too long
  std::string detail;
  std::deque<std::string> tail;
  // The process rank a flight recorder of this node had named behind when
  // this rank failed (-1: none), so that other nodes learn it with the failure.
  int stuck_rank_named = -1;

  bool failed() const { return spawn_failed || !exited || exit_code != 0; }
  // Exit code this failure maps to: the code, or 128 + signal.
  int ExitStatus() const;
  // "pid 20883", or "pid 20883, getpid() 3 in its PID namespace".
  std::string PidText() const;
  // "exit code 3", "signal SIGSEGV", "exec failed: ...".
  std::string Describe() const;
};

// The stacks of one rank, read while it ran (stack_dump.h).
struct RankStacks {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = -1;
  StackCapture capture;
  std::string log_file;   // where the whole stacks went; empty: nowhere
  std::string log_error;  // why they could not be written there
};

enum class AttemptOutcome {
  kSucceeded,      // every rank exited 0
  kRankFailed,     // first_failure says which
  kSignalled,      // the launcher got SIGINT/SIGTERM/SIGHUP
  kStoppedByPeer,  // the monitor asked to stop (another node failed or restarts)
};

// A rank lost under --on_failure=shrink while the others went on.
struct RankLoss {
  RankExit exit;
  int64_t unix_ms = 0;  // when the launcher saw it
};

struct AttemptResult {
  // Under --on_failure=shrink, kSucceeded when a rank exited 0 after the
  // losses in `lost`; kRankFailed (first_failure: the first loss) when none
  // did, or when the callback refused to go on.
  AttemptOutcome outcome = AttemptOutcome::kSucceeded;
  int launcher_signal = 0;
  RankExit first_failure;
  std::vector<RankExit> ranks;  // by local rank
  std::vector<RankLoss> lost;   // in the order they were lost (shrink only)
  // The stuck ranks' stacks, read before the stop (capture_stuck_stacks).
  std::vector<RankStacks> stuck_stacks;
  std::chrono::steady_clock::time_point all_started;
};

// Called every monitor interval while ranks run; returns true to stop them.
using PeerMonitor = std::function<bool()>;

struct SupervisorOptions {
  std::chrono::milliseconds term_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds monitor_interval{100};
  PeerMonitor peer_monitor;  // may be empty (single node)
  // Called once the first rank fails, before the others are stopped, so other
  // nodes learn of it while this node tears down.
  std::function<void(const RankExit&)> on_first_failure;
  // --on_failure=shrink: called for each rank that fails while others still
  // run (a stopped one is killed first); returns true when the loss was
  // published and the others go on, false to stop them all as without it
  // (fewer than --min_ranks left). Empty: the first failure stops everyone.
  std::function<bool(const RankExit&)> on_rank_lost;
  // Several nodes: other nodes' ranks go on when this node's last rank is
  // lost, so that loss is offered to on_rank_lost too, and a node whose
  // every rank was lost (and accepted) ends as kSucceeded with `lost`.
  bool ranks_on_other_nodes = false;
  // A rank stopped (SIGSTOP, SIGTSTP...) this long counts as failed, so the
  // run ends naming it rather than waiting on it.
  std::chrono::milliseconds stopped_rank_timeout{std::chrono::seconds(15)};
  // Fork the ranks into a new PID namespace when the kernel permits; else
  // (or when false) through a RankWatcher.
  bool use_pid_namespace = true;
  // When a rank's flight recorder names a process of this node as the one
  // behind (failure_summary.h), read that process's stacks before anything
  // stops it; and on SIGUSR2, print every rank's stacks and go on.
  bool capture_stuck_stacks = true;
  // When peer_monitor asks to stop: the process rank another node's flight
  // recorder named behind (-1: none); when it is a rank of this node, its
  // stacks are read before the stop. May be empty.
  std::function<int()> stuck_rank_named_by_peer;
  StackCaptureOptions stacks = StackCaptureOptions::FromEnvironment();
};

// Runs the ranks of one attempt to the end. Every child is in its own process
// group, dies with the launcher (PR_SET_PDEATHSIG; without a PID namespace,
// with the watcher that forked it) and is reaped before this returns; so is
// every descendant (pid_namespace.h, rank_watcher.h). The console is written
// without blocking (console.h).
AttemptResult RunAttempt(const std::vector<RankSpec>& ranks, const SupervisorOptions& options);

// Makes orphaned grandchildren of the ranks children of the launcher, so they
// are reaped here and never left behind as zombies.
void MakeLauncherASubreaper();

}  // namespace infini::launch
