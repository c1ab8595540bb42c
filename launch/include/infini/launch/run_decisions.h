// What a launcher does about each thing that happens to a run, as pure
// functions of the run's mode: one table (run_decisions.cc) whose rows are
// the whole truth, read by the Launcher (main.cc) and the run record's
// (rendezvous_link.cc) instead of rules written inline, and unit-tested
// without sockets or processes (tests/launch/run_decisions_test.cc).
// docs/launcher.md, "Run states and decisions", prints the table.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace infini::launch {

struct LaunchOptions;

namespace decisions {

// The run's mode: --nnodes N or MIN:MAX, --on_failure, --rdzv_backend.
enum class Membership { kFixed, kElastic };
enum class OnFailure { kRestart, kShrink };
enum class Meeting { kTcp, kEtcd };
struct Mode {
  Membership membership = Membership::kFixed;
  OnFailure on_failure = OnFailure::kRestart;
  Meeting meeting = Meeting::kTcp;
  bool operator==(const Mode&) const = default;
};
Mode ModeOf(const LaunchOptions& options);
// Every mode, supported or not (the table's tests iterate it).
std::vector<Mode> AllModes();

// A mode infini_run refuses, as the one line that says so; nothing when it
// runs. The one place that decides --nnodes=MIN:MAX with --on_failure=shrink.
std::optional<std::string> RefusedMode(const Mode& mode);

enum class Event {
  kNodeArrived,           // a node arrived while a round runs, and waits to join
  kRoundClosed,           // every member is ready: the attempt starts
  kOwnKeepAliveMissed,    // this node was declared lost (its lease, its slot)
  kNodeLostWhileJoining,  // a member never became ready (it died joining)
  kNodeLost,              // another node's keep-alive ran out while the ranks run
  kConnectionClosed,      // another node's launcher closed its store connection
  kRankFailed,            // a rank of this node failed
  kRankFailedAlone,       // ... and no node was lost meanwhile (elastic's second look)
  kPeerFailed,            // another node published the run's failure
  kRestartRequested,      // another node asked every node to restart
  kStoreLost,             // the meeting point (node 0's store, etcd) is gone
  kRanksSucceeded,        // every rank of this node exited 0
  kEveryNodeSucceeded,    // ... and every other node's too
  kNodeLostOthersDone,    // a node lost once every other had succeeded
  kSignalled,             // the launcher got SIGINT/SIGTERM/SIGHUP
};
std::vector<Event> AllEvents();
const char* EventName(Event event);

enum class Action {
  kGoOn,           // nothing changes; the ranks run on (or start)
  kWait,           // wait for the next event (the others, a loss to show)
  kRestartAll,     // stop every rank of every node, start the next attempt
  kNewRound,       // elastic: stop, meet again, run the new world
  kShrinkInPlace,  // publish the lost ranks; the others go on (--min_ranks)
  kStop,           // stop every rank and exit with `status`
};
const char* ActionName(Action action);

// Where a stop's exit status comes from.
enum class Status {
  kNone,      // not a stop
  kSuccess,   // 0
  kRankExit,  // the failed rank's (128 + signal for a signal)
  kPeerExit,  // what the failing node published
  kLauncher,  // 1: the launcher's own error (store lost, this node lost)
  kSignal,    // 128 + the launcher's signal
};
const char* StatusName(Status status);

struct Decision {
  Action action = Action::kGoOn;
  Status status = Status::kNone;
  // The restart is one of --max_restarts (a failure); a membership change
  // (a new round) is not.
  bool counts_as_restart = false;
};

// One row: a mode pattern (nullopt: any), an event, the decision, and when
// the restarts are spent, the decision instead.
struct Row {
  std::optional<Membership> membership;
  std::optional<OnFailure> on_failure;
  std::optional<Meeting> meeting;
  Event event;
  Decision decision;
  std::optional<Decision> restarts_spent;
  const char* why;
};
const std::vector<Row>& Table();

// The one row for `mode` and `event`'s decision (`restarts_left`: whether
// --max_restarts allows one more). A refused mode or a combination without
// its row throws std::logic_error: the table's tests keep that from happening.
Decision Decide(const Mode& mode, Event event, bool restarts_left);

// The launcher's state (torchrun's WorkerState).
enum class RunState { kInitial, kHealthy, kUnhealthy, kStopped, kSucceeded, kFailed };
const char* StateName(RunState state);
// The one transition function: the state after `event` and its `decision`
// (a stop's status already resolved to `exit_status`). Succeeded and failed
// are final.
RunState NextState(RunState state, Event event, const Decision& decision, int exit_status);

// The table as Markdown rows, for docs/launcher.md.
std::string TableAsMarkdown();

}  // namespace decisions
}  // namespace infini::launch
