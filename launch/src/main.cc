// infini_run: parse, rendezvous, then per attempt: start the ranks, supervise,
// stop or restart.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "infini/common/launch_env.h"
#include "infini/launch/child_env.h"
#include "infini/launch/console.h"
#include "infini/launch/failure_summary.h"
#include "infini/launch/file_limit.h"
#include "infini/launch/live_stacks.h"
#include "infini/launch/log_files.h"
#include "infini/launch/loss_publisher.h"
#include "infini/launch/net_util.h"
#include "infini/launch/node_rendezvous.h"
#include "infini/launch/options.h"
#include "infini/launch/pid_namespace.h"
#include "infini/launch/signal_watcher.h"
#include "infini/launch/supervisor.h"
#include "infini/launch/trace_merge.h"
#include "infini/rendezvous/store.h"

extern char** environ;

namespace infini::launch {
namespace {

constexpr int kUsageExitCode = 2;
constexpr int kLauncherErrorExitCode = 1;
// How long queued console output may take to drain at exit.
constexpr std::chrono::milliseconds kConsoleFlushBound{2000};

NodePlacement PlacementOf(const NodeRendezvous& node) {
  return {node.node_rank(),   node.nnodes(),           node.master_addr(),
          node.master_port(), node.ranks_store_addr(), node.ranks_store_port()};
}

std::vector<RankSpec> MakeRankSpecs(const LaunchOptions& options, const WorldContext& world,
                                    RunLogFolder* logs, int attempt) {
  std::vector<RankSpec> specs;
  for (int local_rank = 0; local_rank < options.processes_per_node; ++local_rank) {
    RankSpec spec;
    spec.local_rank = local_rank;
    spec.global_rank = world.layout.GlobalRank(local_rank);
    spec.program_path = options.program_path;
    spec.argv = options.program_argv;
    spec.environment = MergeEnvironment(environ, LauncherVariables(world, local_rank));
    const int redirected = options.redirects.CodeFor(local_rank);
    const bool shown = options.ShowsOnConsole(local_rank);
    spec.output.global_rank = spec.global_rank;
    spec.output.stdout_to_console = shown && !(redirected & StreamSelection::kStdout);
    spec.output.stderr_to_console = shown && !(redirected & StreamSelection::kStderr);
    if (logs) {
      RankLogFiles files = logs->CreateRankFiles(attempt, spec.global_rank);
      spec.output.stdout_log_fd = files.stdout_fd;
      spec.output.stderr_log_fd = files.stderr_fd;
      spec.log_folder = logs->AttemptPath(attempt) + "/rank_" + std::to_string(spec.global_rank);
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

class Launcher {
 public:
  explicit Launcher(const LaunchOptions& options) : options_(options) {
    if (!options_.log_dir.empty()) {
      logs_ = std::make_unique<RunLogFolder>(options_.log_dir, options_.run_id);
      // --tee/--redirects alone write to a default folder the user never named.
      if (options_.WantsLogFiles()) {
        Say("each rank's output is written to " + logs_->RunPath() +
            "/attempt_K/rank_N/{stdout,stderr}.log (--tee/--redirects; --log_dir chooses the "
            "folder)");
      }
    }
  }

  int Run() {
    node_ = EstablishWhileWatchingSignals(options_);
    node_->StartLink();
    attempt_ = node_->first_attempt();
    failure_restarts_ = node_->failure_restarts();
    if (options_.elastic()) SayRound();
    // A replacement node joins the attempt the others run (they are long
    // past its start).
    if (node_->replaces_lost_node()) node_->JoinRunningAttempt(attempt_);
    while (true) {
      membership_changed_ = false;
      if (node_->replaces_lost_node() || node_->WaitAllNodesReady(attempt_)) {
        std::optional<int> exit_status = RunOneAttempt(attempt_);
        if (exit_status) return *exit_status;
      } else {
        membership_changed_ = true;
      }
      if (membership_changed_) {
        MeetAgain();
      } else {
        ++attempt_;
        ++failure_restarts_;
      }
    }
  }
  // The launcher was signalled outside an attempt: tell the other nodes.
  void PublishInterruption(int signal_number) {
    if (!node_) return;
    char name[32];
    node_->PublishFailure(attempt_, false, 128 + signal_number,
                          "infini_run on node " + std::to_string(node_->node_rank()) + " got " +
                              SignalName(signal_number, name));
  }

  // Ends the rendezvous (flushing what other nodes must read), bounded.
  void Finish() { node_.reset(); }

  // Node 0 merges the trace (a shared --trace_dir holds every node's ranks).
  void FinishTrace() const {
    if (options_.trace_dir.empty() || !node_ || node_->node_rank() != 0) return;
    const TraceEnd end =
        FinishTraceOfRun(AbsoluteTraceFolder(options_.trace_dir), options_.comm_summary);
    for (const std::string& note : end.notes) Say(note);
    if (!end.summary.empty()) Console::Get().WriteLine(Console::kStderr, end.summary);
  }

 private:
  // Restarts after a failure are counted; an elastic run's membership
  // changes are not (torchrun's).
  bool CanRestart() const { return failure_restarts_ < options_.max_restarts; }
  std::string RestartOrdinal() const {
    return "restart " + std::to_string(failure_restarts_ + 1) + " of " +
           std::to_string(options_.max_restarts);
  }

  // Elastic runs: this node's ranks are stopped; meet the others again and
  // go on with the new world.
  void MeetAgain() {
    std::optional<PeerFailure> change = node_->MembershipChanged();
    Say((change ? change->message : std::string("the membership changed")) +
        "; meeting the other nodes again in round " + std::to_string(node_->round() + 1) +
        " (a membership change, not counted against --max_restarts)");
    attempt_ = node_->NextRound(attempt_ + 1);
    SayRound();
  }

  void SayRound() {
    const int world_size =
        RankLayout{node_->nnodes(), options_.processes_per_node, node_->node_rank()}.world_size();
    Say("round " + std::to_string(node_->round()) + ": node " + std::to_string(node_->node_rank()) +
        " of " + std::to_string(node_->nnodes()) + " (--nnodes=" + options_.NnodesText() +
        "), WORLD_SIZE=" + std::to_string(world_size) + ", attempt " + std::to_string(attempt_));
  }

  // Elastic runs: a rank that failed because a node was lost (its
  // collective broke) is the membership change, not a failure: the loss is
  // given twice the heartbeat timeout to show before the failure counts.
  bool FailureWasAMembershipChange() {
    if (!options_.elastic()) return false;
    const auto deadline = std::chrono::steady_clock::now() + 2 * options_.heartbeat_timeout;
    try {
      while (std::chrono::steady_clock::now() < deadline) {
        if (node_->MembershipChanged()) return true;
        if (node_->PeerFailed() || !node_->StoreLost().empty()) return false;
        usleep(20000);
      }
    } catch (...) {
    }
    return node_->MembershipChanged().has_value();
  }

  SupervisorOptions MakeSupervisorOptions(int attempt) {
    SupervisorOptions supervision;
    supervision.term_timeout = options_.term_timeout;
    supervision.monitor_interval = options_.monitor_interval;
    supervision.stopped_rank_timeout = options_.heartbeat_timeout;
    supervision.use_pid_namespace = options_.use_pid_namespace;
    peer_failure_.reset();
    restart_requested_ = false;
    lost_store_.clear();
    if (options_.shrink_on_failure) {
      supervision.on_rank_lost =
          MakeShrinkHandler({node_->store_addr(), node_->store_port(), options_.run_token,
                             options_.run_id + "/" + std::to_string(attempt),
                             options_.layout().world_size(), options_.min_ranks, HostName()});
      supervision.ranks_on_other_nodes = options_.multi_node();
    }
    if (!options_.multi_node()) return supervision;
    // Snapshots only: the link thread does the store's network calls.
    supervision.peer_monitor = [this, attempt] {
      node_->SayNews();
      if ((peer_failure_ = node_->PeerFailed())) return true;
      if (!(lost_store_ = node_->StoreLost()).empty()) return true;
      if (node_->MembershipChanged()) return true;
      restart_requested_ = node_->RestartRequested(attempt);
      return restart_requested_;
    };
    supervision.stuck_rank_named_by_peer = [this] {
      return peer_failure_ ? StuckRankInMessage(peer_failure_->message) : -1;
    };
    supervision.on_first_failure = [this, attempt](const RankExit& rank) {
      // Elastic: published once it is known not to be a lost node's doing.
      if (options_.elastic()) return;
      node_->PublishFailure(attempt, CanRestart(), rank.ExitStatus(), FailureMessage(rank));
    };
    return supervision;
  }

  static std::string FailureMessage(const RankExit& rank) {
    // The stuck rank travels with the failure, for its node to read its stacks.
    return "rank " + std::to_string(rank.global_rank) + " (" + rank.PidText() + " on " +
           HostName() + ") failed: " + rank.Describe() +
           (rank.stuck_rank_named >= 0 ? StuckRankNote(rank.stuck_rank_named) : "");
  }

  // Returns the exit status when the run is over, nothing when it goes on
  // (a restart, or with membership_changed_ a new round).
  std::optional<int> RunOneAttempt(int attempt) {
    WorldContext world = MakeWorld(options_, PlacementOf(*node_), attempt, environ);
    if (node_->replaces_lost_node()) TakeJoinBlock(attempt, &world);
    std::vector<RankSpec> specs = MakeRankSpecs(options_, world, logs_.get(), attempt);
    // Node 0's launcher hosts the store: its clock is the trace's reference.
    std::unique_ptr<ClockAnswerer> clock_answerer;
    if (!options_.trace_dir.empty() && node_->node_rank() == 0) {
      clock_answerer = std::make_unique<ClockAnswerer>(
          node_->store_addr(), node_->store_port(), options_.run_token,
          options_.run_id + "/" + std::to_string(attempt));
    }
    AttemptResult result = RunAttempt(specs, MakeSupervisorOptions(attempt));
    clock_answerer.reset();
    SummaryContext context{options_.run_id,
                           node_->node_rank(),
                           HostName(),
                           attempt,
                           options_.max_restarts,
                           logs_ ? logs_->AttemptPath(attempt) : "",
                           {}};
    switch (result.outcome) {
      case AttemptOutcome::kSucceeded: {
        std::optional<int> outcome = FinishSucceededAttempt(attempt);
        // --on_failure=shrink: the run went on, and still names who was lost
        // (whole nodes too: known once every node finished).
        context.node_losses = node_->NodeLossLines();
        for (const std::string& line : Lines(FormatLossSummary(result, context))) {
          Console::Get().WriteLine(Console::kStderr, line + "\n");
        }
        return outcome;
      }
      case AttemptOutcome::kRankFailed:
        // Elastic: a rank broken by a lost node is the membership change,
        // which MeetAgain says in one line; no failure summary for it.
        if (FailureWasAMembershipChange()) {
          membership_changed_ = true;
          return std::nullopt;
        }
        for (const std::string& line : Lines(FormatFailureSummary(result, context))) {
          Console::Get().WriteLine(Console::kStderr, line + "\n");
        }
        if (options_.elastic()) {
          node_->PublishFailure(attempt, CanRestart(), result.first_failure.ExitStatus(),
                                FailureMessage(result.first_failure));
        }
        if (CanRestart()) {
          Say("restarting every rank" + std::string(options_.multi_node() ? " of every node" : "") +
              " (" + RestartOrdinal() + ")");
          return std::nullopt;
        }
        return result.first_failure.ExitStatus();
      case AttemptOutcome::kSignalled: {
        char name[32];
        SignalName(result.launcher_signal, name);
        const int status = 128 + result.launcher_signal;
        PublishInterruption(result.launcher_signal);
        Say(std::string("got ") + name + "; stopped every rank, exiting with " +
            std::to_string(status));
        return status;
      }
      case AttemptOutcome::kStoppedByPeer:
        if (peer_failure_) {
          const int status = ReportPeerFailure(*peer_failure_);
          for (const RankStacks& stacks : result.stuck_stacks) {
            for (const std::string& line : Lines(FormatRankStacks(
                     stacks, "infini_run: ", "before infini_run stopped it", false))) {
              Console::Get().WriteLine(Console::kStderr, line + "\n");
            }
          }
          return status;
        }
        if (!lost_store_.empty()) {
          const std::string note = node_->StoreLossNote();
          Say("lost " + node_->StoreDescription() + ": " + lost_store_ +
              "; stopped this node's ranks" + (note.empty() ? "" : "; " + note));
          return kLauncherErrorExitCode;
        }
        if (!node_->RestartRequested(attempt) && node_->MembershipChanged()) {
          membership_changed_ = true;
          return std::nullopt;
        }
        Say("another node's rank failed in attempt " + std::to_string(attempt) +
            "; restarting this node's ranks too (" + RestartOrdinal() + ")");
        return std::nullopt;
    }
    return kLauncherErrorExitCode;
  }

  // A replacement node (--on_failure=shrink): takes its launch ranks and
  // publishes its join notice, for the survivors' ranks to admit it and
  // their launchers to watch it (loss_notice.h, "Joins").
  void TakeJoinBlock(int attempt, WorldContext* world) {
    const std::string how =
        "node " + std::to_string(node_->node_rank()) + " (host " + HostName() + ") joined";
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    LossPublisher publisher({node_->store_addr(), node_->store_port(), options_.run_token,
                             options_.run_id + "/" + std::to_string(attempt),
                             options_.layout().world_size(), options_.min_ranks, HostName()});
    const JoinBlock block = publisher.TakeJoinBlock(options_.processes_per_node, how, now);
    // The ranks' numbering: a node after every other (loss_notice.h, "Joins").
    world->join_notice = block.number;
    world->layout = RankLayout::JoinedAfterEveryNode(block.world_size, options_.processes_per_node);
    node_->PublishJoin(block.notice);
    Say(how + " a running run in place of a lost node: ranks " +
        std::to_string(block.notice.global_ranks.front()) + ".." +
        std::to_string(block.notice.global_ranks.back()) + " (" + env::kJoining + "=" +
        std::to_string(block.number) + ", WORLD_SIZE=" + std::to_string(block.world_size) +
        ") wait to be admitted");
  }

  std::optional<int> FinishSucceededAttempt(int attempt) {
    std::optional<PeerFailure> failure;
    switch (node_->WaitForOtherNodes(attempt, &failure)) {
      case NodeRendezvous::FinishOutcome::kAllSucceeded:
        return 0;
      case NodeRendezvous::FinishOutcome::kPeerFailed:
        return ReportPeerFailure(*failure);
      case NodeRendezvous::FinishOutcome::kRestart:
        Say("another node's rank failed; restarting this node's ranks too (" + RestartOrdinal() +
            ")");
        return std::nullopt;
      case NodeRendezvous::FinishOutcome::kMembershipChanged:
        membership_changed_ = true;
        return std::nullopt;
      case NodeRendezvous::FinishOutcome::kSucceededWithoutLostNode:
        Say(failure->message + "; every other node's ranks had succeeded: the run is done");
        return 0;
    }
    return kLauncherErrorExitCode;
  }

  int ReportPeerFailure(const PeerFailure& failure) {
    std::string who =
        failure.node_rank >= 0 ? "node " + std::to_string(failure.node_rank) : "a joining node";
    Say(who + " failed: " + failure.message + "; stopped this node's ranks, exiting with " +
        std::to_string(failure.exit_status));
    return failure.exit_status;
  }

  static std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
      lines.push_back(text.substr(start, end - start));
    }
    return lines;
  }

  LaunchOptions options_;
  std::unique_ptr<RunLogFolder> logs_;
  std::unique_ptr<NodeRendezvous> node_;
  int attempt_ = 0;
  int failure_restarts_ = 0;         // restarts --max_restarts counts
  bool membership_changed_ = false;  // elastic: the attempt ended in a new round
  std::optional<PeerFailure> peer_failure_;
  bool restart_requested_ = false;
  std::string lost_store_;
};

int RunLauncher(const LaunchOptions& options) {
  std::unique_ptr<Launcher> launcher;
  try {
    launcher = std::make_unique<Launcher>(options);
    int status = launcher->Run();
    launcher->FinishTrace();
    launcher->Finish();
    return status;
  } catch (const Interrupted& interrupted) {
    char name[32];
    if (launcher) launcher->PublishInterruption(interrupted.signal_number);
    Say(std::string("got ") + SignalName(interrupted.signal_number, name) + " while waiting");
    if (launcher) launcher->Finish();
    return 128 + interrupted.signal_number;
  } catch (const LaunchError& error) {
    Say(std::string("error: ") + OneLine(error.what()));
    if (launcher) launcher->Finish();
    return kLauncherErrorExitCode;
  } catch (const rendezvous::StoreError& error) {
    Say(std::string("error: rendezvous store: ") + OneLine(error.what()));
    if (launcher) launcher->Finish();
    return kLauncherErrorExitCode;
  }
}

int Main(int argc, char** argv) {
  LaunchOptions options;
  try {
    if (!ParseLaunchCommandLine(argc, argv, &options, environ)) {
      fputs(LaunchUsage().c_str(), stdout);
      return 0;
    }
    if (options.dump_stacks) {
      try {
        return RequestStacksOfLiveRuns(options.dump_stacks_run_id);
      } catch (const LaunchError& error) {
        Say(std::string("error: ") + OneLine(error.what()));
        return kLauncherErrorExitCode;  // no such run: not a mistake in the command line
      }
    }
    for (const std::string& note : options.notes) Say(note);
    ResolveLaunchOptions(&options);
    if (options.dry_run) {
      fputs(DryRunText(options, environ).c_str(), stdout);
      return 0;
    }
    PrepareTraceFolder(options.trace_dir);
  } catch (const UsageError& error) {
    Say(std::string("error: ") + error.what());
    return kUsageExitCode;
  } catch (const LaunchError& error) {
    Say(std::string("error: ") + OneLine(error.what()));
    return kUsageExitCode;
  }
  SignalWatcher::Install();
  RememberInheritedChildren();  // before any rank: they are the user's
  MakeLauncherASubreaper();
  RaiseOpenFileLimit();
  return RunLauncher(options);
}

}  // namespace
}  // namespace infini::launch

int main(int argc, char** argv) {
  const int status = infini::launch::Main(argc, argv);
  fflush(stdout);
  infini::launch::Console::Get().Flush(infini::launch::kConsoleFlushBound);
  // _exit: a link thread may still sit in a call to a stalled store; nothing
  // is left to destroy that matters.
  _exit(status);
}
