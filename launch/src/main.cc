// infini_run: parse, rendezvous, then the run as states: each event (an
// attempt's end, a node lost...) decided by run_decisions.h's table.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

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
#include "infini/launch/run_decisions.h"
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
// How long a fixed run's failed rank waits for a lost node to show before
// its failure is told, at least (a dead launcher shows within two link
// steps: node 0 reads its closed connection, the others the failure key).
constexpr std::chrono::milliseconds kLossGraceFloor{500};

// Whether a published failure is a node's loss ("node K lost: ..." or
// "node K lost while joining ...", as the watch and the joins write it).
bool NamesANodeLoss(const PeerFailure& failure) {
  return failure.message.rfind("node " + std::to_string(failure.node_rank) + " lost", 0) == 0;
}

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

// One thing that happened to the run (run_decisions.h's event), with what
// telling it needs. Waits and callbacks return these; the loop decides.
struct Occurrence : RunEvent {
  Occurrence() = default;
  explicit Occurrence(RunEvent other) : RunEvent(std::move(other)) {}
  int signal_number = 0;  // kSignalled
  // The attempt that ended (absent for events between attempts).
  std::shared_ptr<const AttemptResult> result;
  SummaryContext context;
};

class Launcher {
 public:
  explicit Launcher(const LaunchOptions& options)
      : options_(options), mode_(decisions::ModeOf(options)) {
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

  // The run as states (torchrun's WorkerState): each event's decision comes
  // from the table; this loop only carries it out.
  int Run() {
    node_ = EstablishWhileWatchingSignals(options_);
    node_->StartLink();
    attempt_ = node_->first_attempt();
    failure_restarts_ = node_->failure_restarts();
    if (options_.elastic()) SayRound();
    // A replacement node joins the attempt the others run (they are long
    // past its start): the record admitted it ready (Meet).
    Occurrence occurrence = Meet();
    int status = 0;
    while (state_ != decisions::RunState::kSucceeded && state_ != decisions::RunState::kFailed) {
      const decisions::Decision decision = decisions::Decide(mode_, occurrence.event, CanRestart());
      status = StatusOf(decision, occurrence);
      state_ = decisions::NextState(state_, occurrence.event, decision, status);
      switch (decision.action) {
        case decisions::Action::kGoOn:  // the round closed: the attempt runs
          occurrence =
              occurrence.event == decisions::Event::kRoundClosed ? RunOneAttempt(attempt_) : Meet();
          break;
        case decisions::Action::kWait:
          occurrence = WaitAfter(occurrence);
          break;
        case decisions::Action::kShrinkInPlace:
          // The supervisor shrank what it could (on_rank_lost): an attempt
          // that still ended on a rank's failure cannot go on.
          occurrence.event = decisions::Event::kRankFailedAlone;
          break;
        case decisions::Action::kRestartAll:
          Tell(occurrence, decision, status);
          ++attempt_;
          if (decision.counts_as_restart) ++failure_restarts_;
          occurrence = Meet();
          break;
        case decisions::Action::kNewRound:
          MeetAgain(occurrence);
          occurrence = Meet();
          break;
        case decisions::Action::kStop:  // succeeded or failed: the loop ends
          Tell(occurrence, decision, status);
          break;
      }
    }
    return status;
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

  // Where the table waits after a rank's failure (elastic: a lost node may
  // have broken it), the failure is published once no loss explains it.
  bool FailureWaitsForItsCause() const {
    return decisions::Decide(mode_, decisions::Event::kRankFailed, true).action ==
           decisions::Action::kWait;
  }

  // A fixed multi-node run restarting or stopping on a failure: a rank whose
  // collective broke because a node was lost fails about when the loss is
  // seen, so the failure is published only once a short look found no loss
  // (the cause is then named the same way every time). Elastic runs wait longer
  // (FailureWaitsForItsCause); shrink goes on without the lost ranks.
  bool FailureLooksForALossFirst() const {
    return options_.multi_node() && mode_.membership == decisions::Membership::kFixed &&
           mode_.on_failure == decisions::OnFailure::kRestart;
  }

  // The node loss (published by the node that saw it) or the store's loss
  // (node 0's) that shows within the grace after a rank's first failure, as
  // the attempt's end; nothing when none does, or another node's failure or
  // restart shows first.
  std::optional<Occurrence> LossBehindRankFailure(int attempt) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::max(kLossGraceFloor, 5 * options_.monitor_interval);
    while (true) {
      if (std::optional<RunEvent> seen = node_->EventSeen(attempt)) {
        const bool loss =
            seen->event == decisions::Event::kStoreLost ||
            (seen->event == decisions::Event::kPeerFailed && NamesANodeLoss(*seen->peer));
        if (loss) return Occurrence(std::move(*seen));
        return std::nullopt;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      // Short: a signal is read once the look ends.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // A stop's exit status: the rank's, the failing node's or 128 + signal
  // travel in the occurrence.
  static int StatusOf(const decisions::Decision& decision, const Occurrence& occurrence) {
    using decisions::Status;
    if (decision.status == Status::kNone || decision.status == Status::kSuccess) return 0;
    return decision.status == Status::kLauncher ? kLauncherErrorExitCode : occurrence.exit_status;
  }

  // Waits until every node is ready for attempt_: the round closed, or
  // (elastic) its membership changed first.
  Occurrence Meet() {
    if (node_->replaces_lost_node() || node_->WaitAllNodesReady(attempt_)) return {};
    return Occurrence(node_->MembershipEvent(true));
  }

  // Elastic runs: this node's ranks are stopped; meet the others again and
  // go on with the new world.
  void MeetAgain(const Occurrence& change) {
    Say((change.peer ? change.peer->message : std::string("the membership changed")) +
        "; meeting the other nodes again in round " + std::to_string(node_->round() + 1) +
        " (a membership change, not counted against --max_restarts)");
    attempt_ = node_->NextRound();
    SayRound();
  }

  void SayRound() {
    const int world_size =
        RankLayout{node_->nnodes(), options_.processes_per_node, node_->node_rank()}.world_size();
    Say("round " + std::to_string(node_->round()) + ": node " + std::to_string(node_->node_rank()) +
        " of " + std::to_string(node_->nnodes()) + " (--nnodes=" + options_.NnodesText() +
        "), WORLD_SIZE=" + std::to_string(world_size) + ", attempt " + std::to_string(attempt_));
  }

  // kWait's second look. A failed rank (elastic): broken by a lost node
  // (its collective broke) it is the membership change, not a failure: the
  // loss is given twice the heartbeat timeout to show. Succeeded ranks: the
  // other nodes' outcome.
  Occurrence WaitAfter(Occurrence occurrence) {
    if (occurrence.event == decisions::Event::kRanksSucceeded) {
      Occurrence outcome(node_->WaitForOtherNodes(attempt_));
      // --on_failure=shrink: the run went on, and still names who was lost
      // (whole nodes too: known once every node finished).
      occurrence.context.node_losses = node_->NodeLossLines();
      for (const std::string& line :
           Lines(FormatLossSummary(*occurrence.result, occurrence.context))) {
        Console::Get().WriteLine(Console::kStderr, line + "\n");
      }
      return outcome;
    }
    std::optional<RunEvent> change = node_->LossBehindRankFailure(2 * options_.heartbeat_timeout);
    if (change) return Occurrence(std::move(*change));
    occurrence.event = decisions::Event::kRankFailedAlone;
    return occurrence;
  }

  SupervisorOptions MakeSupervisorOptions(int attempt, std::optional<Occurrence>* stopped_by) {
    SupervisorOptions supervision;
    supervision.term_timeout = options_.term_timeout;
    supervision.monitor_interval = options_.monitor_interval;
    supervision.stopped_rank_timeout = options_.heartbeat_timeout;
    supervision.use_pid_namespace = options_.use_pid_namespace;
    if (decisions::Decide(mode_, decisions::Event::kRankFailed, false).action ==
        decisions::Action::kShrinkInPlace) {
      supervision.on_rank_lost =
          MakeShrinkHandler({node_->store_addr(), node_->store_port(), options_.run_token,
                             options_.run_id + "/" + std::to_string(attempt),
                             options_.layout().world_size(), options_.min_ranks, HostName()});
      supervision.ranks_on_other_nodes = options_.multi_node();
    }
    if (!options_.multi_node()) return supervision;
    // The first event the link shows stops the ranks; the loop decides it.
    supervision.peer_monitor = [this, attempt, stopped_by] {
      node_->SayNews();
      if (!*stopped_by) {
        if (std::optional<RunEvent> seen = node_->EventSeen(attempt)) stopped_by->emplace(*seen);
      }
      return stopped_by->has_value();
    };
    supervision.stuck_rank_named_by_peer = [stopped_by] {
      const std::optional<Occurrence>& seen = *stopped_by;
      return seen && seen->event == decisions::Event::kPeerFailed
                 ? StuckRankInMessage(seen->peer->message)
                 : -1;
    };
    supervision.on_first_failure = [this, attempt, stopped_by](const RankExit& rank) {
      if (FailureWaitsForItsCause()) return;
      if (FailureLooksForALossFirst()) {
        // On the supervisor's thread, as peer_monitor: the loop is held for
        // the short look only.
        if (std::optional<Occurrence> loss = LossBehindRankFailure(attempt)) {
          stopped_by->emplace(std::move(*loss));
          return;
        }
      }
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

  // Runs the ranks of `attempt` until they end or an event stops them: how
  // it ended.
  Occurrence RunOneAttempt(int attempt) {
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
    std::optional<Occurrence> stopped_by;
    auto result = std::make_shared<const AttemptResult>(
        RunAttempt(specs, MakeSupervisorOptions(attempt, &stopped_by)));
    clock_answerer.reset();
    Occurrence occurrence;
    switch (result->outcome) {
      case AttemptOutcome::kSucceeded:
        occurrence.event = decisions::Event::kRanksSucceeded;
        break;
      case AttemptOutcome::kRankFailed:
        occurrence.event = decisions::Event::kRankFailed;
        occurrence.exit_status = result->first_failure.ExitStatus();
        // A node lost meanwhile broke the rank's collective: the loss is the
        // cause (on_first_failure looked for it).
        if (stopped_by && FailureLooksForALossFirst()) occurrence = std::move(*stopped_by);
        break;
      case AttemptOutcome::kSignalled:
        occurrence.event = decisions::Event::kSignalled;
        occurrence.signal_number = result->launcher_signal;
        occurrence.exit_status = 128 + result->launcher_signal;
        break;
      case AttemptOutcome::kStoppedByPeer:
        // Without an event seen (none is expected), as another node's restart.
        occurrence = stopped_by.value_or(
            Occurrence(RunEvent{decisions::Event::kRestartRequested, std::nullopt, "", 1}));
        break;
    }
    occurrence.result = result;
    occurrence.context = {options_.run_id,
                          node_->node_rank(),
                          HostName(),
                          attempt,
                          options_.max_restarts,
                          logs_ ? logs_->AttemptPath(attempt) : "",
                          {}};
    return occurrence;
  }

  // Says what the run does about `occurrence` (a restart or a stop with
  // `status`), and tells the other nodes what they must know.
  void Tell(const Occurrence& occurrence, const decisions::Decision& decision, int status) {
    using decisions::Event;
    const bool restart = decision.action == decisions::Action::kRestartAll;
    switch (occurrence.event) {
      case Event::kRankFailed:
      case Event::kRankFailedAlone:
        for (const std::string& line :
             Lines(FormatFailureSummary(*occurrence.result, occurrence.context))) {
          Console::Get().WriteLine(Console::kStderr, line + "\n");
        }
        // The record holds what was decided (a fixed run of several nodes
        // published it at the first failure already: then this changes
        // nothing, a restart of the same attempt and a later stop being
        // no-ops).
        node_->PublishFailure(attempt_, restart, occurrence.exit_status,
                              FailureMessage(occurrence.result->first_failure));
        if (restart) {
          Say("restarting every rank" + std::string(options_.multi_node() ? " of every node" : "") +
              " (" + RestartOrdinal() + ")");
        }
        return;
      case Event::kSignalled: {
        char name[32];
        SignalName(occurrence.signal_number, name);
        PublishInterruption(occurrence.signal_number);
        Say(std::string("got ") + name + "; stopped every rank, exiting with " +
            std::to_string(status));
        return;
      }
      case Event::kPeerFailed:
        ReportPeerFailure(*occurrence.peer);
        if (occurrence.result) {
          for (const RankStacks& stacks : occurrence.result->stuck_stacks) {
            for (const std::string& line : Lines(FormatRankStacks(
                     stacks, "infini_run: ", "before infini_run stopped it", false))) {
              Console::Get().WriteLine(Console::kStderr, line + "\n");
            }
          }
        }
        return;
      case Event::kStoreLost: {
        const std::string note = node_->StoreLossNote();
        Say("lost " + node_->StoreDescription() + ": " + occurrence.store_loss +
            "; stopped this node's ranks" + (note.empty() ? "" : "; " + note));
        return;
      }
      case Event::kRestartRequested:
        Say("another node's rank failed" +
            (occurrence.result ? " in attempt " + std::to_string(attempt_) : std::string()) +
            "; restarting this node's ranks too (" + RestartOrdinal() + ")");
        return;
      case Event::kNodeLostOthersDone:
        Say(occurrence.peer->message + "; every other node's ranks had succeeded: the run is done");
        return;
      default:
        return;
    }
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

  void ReportPeerFailure(const PeerFailure& failure) {
    std::string who =
        failure.node_rank >= 0 ? "node " + std::to_string(failure.node_rank) : "a joining node";
    Say(who + " failed: " + failure.message + "; stopped this node's ranks, exiting with " +
        std::to_string(failure.exit_status));
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
  const decisions::Mode mode_;
  std::unique_ptr<RunLogFolder> logs_;
  std::unique_ptr<NodeRendezvous> node_;
  decisions::RunState state_ = decisions::RunState::kInitial;
  int attempt_ = 0;
  int failure_restarts_ = 0;  // restarts --max_restarts counts
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
