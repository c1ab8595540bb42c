// The decision table. A row matches a mode where each of its set fields
// does (unset: any); exactly one row matches each supported mode and event
// (run_decisions_test.cc checks that for every combination).
#include "infini/launch/run_decisions.h"

#include <cstddef>
#include <iterator>
#include <stdexcept>

#include "infini/launch/options.h"

namespace infini::launch::decisions {
namespace {

using M = Membership;
using F = OnFailure;
using E = Event;
using A = Action;
using S = Status;

constexpr Decision kGoOn{A::kGoOn, S::kNone, false};
constexpr Decision kWait{A::kWait, S::kNone, false};
constexpr Decision kNewRound{A::kNewRound, S::kNone, false};
constexpr Decision kShrink{A::kShrinkInPlace, S::kNone, false};
constexpr Decision kRestartCounted{A::kRestartAll, S::kNone, true};
constexpr Decision Stop(Status status) { return {A::kStop, status, false}; }

const std::vector<Row>& Rows() {
  static const std::vector<Row> rows = {
      {{}, {}, {}, E::kRoundClosed, kGoOn, {}, "the attempt starts"},
      {M::kFixed,
       {},
       {},
       E::kNodeArrived,
       kGoOn,
       {},
       "a fixed world does not grow: a node past --nnodes is refused at its join; under shrink a "
       "replacement takes a lost slot and its ranks are admitted in place"},
      {M::kElastic,
       F::kRestart,
       {},
       E::kNodeArrived,
       kNewRound,
       {},
       "below MAX the round reopens for it (torchrun's num_nodes_waiting); not counted"},
      {{},
       {},
       {},
       E::kOwnKeepAliveMissed,
       Stop(S::kLauncher),
       {},
       "the others gave this node up (its lease or heartbeat ran out while it stalled)"},
      {M::kFixed,
       {},
       {},
       E::kNodeLostWhileJoining,
       Stop(S::kLauncher),
       {},
       "a fixed world cannot start without a node: published as the run's failure"},
      {M::kElastic,
       F::kRestart,
       {},
       E::kNodeLostWhileJoining,
       kNewRound,
       {},
       "the others meet again without it; not counted"},
      {M::kFixed,
       F::kRestart,
       {},
       E::kNodeLost,
       Stop(S::kLauncher),
       {},
       "published as the run's failure: every node stops"},
      {M::kFixed,
       F::kShrink,
       {},
       E::kNodeLost,
       kShrink,
       {},
       "its ranks are published as lost; the others go on (they stop below --min_ranks)"},
      {M::kElastic,
       F::kRestart,
       {},
       E::kNodeLost,
       kNewRound,
       {},
       "the round reopens: the others meet again without it; not counted"},
      {{},
       {},
       Meeting::kEtcd,
       E::kConnectionClosed,
       kGoOn,
       {},
       "not raised: etcd holds no connection per launcher; the lease TTL finds the node lost"},
      {M::kFixed,
       F::kRestart,
       Meeting::kTcp,
       E::kConnectionClosed,
       Stop(S::kLauncher),
       {},
       "a node lost at once (its launcher died): published as the run's failure"},
      {M::kFixed,
       F::kShrink,
       Meeting::kTcp,
       E::kConnectionClosed,
       kShrink,
       {},
       "a node lost at once (its launcher died): its ranks are published as lost"},
      {M::kElastic,
       F::kRestart,
       Meeting::kTcp,
       E::kConnectionClosed,
       kNewRound,
       {},
       "a node lost at once (its launcher died): the round reopens; not counted"},
      {M::kFixed,
       F::kRestart,
       {},
       E::kRankFailed,
       kRestartCounted,
       Stop(S::kRankExit),
       "every rank of every node restarts (one of --max_restarts); none left: the run fails"},
      {M::kFixed,
       F::kShrink,
       {},
       E::kRankFailed,
       kShrink,
       {},
       "the rank is published as lost; the others go on (they stop below --min_ranks)"},
      {M::kElastic,
       F::kRestart,
       {},
       E::kRankFailed,
       kWait,
       {},
       "a rank broken by a lost node is the membership change: up to twice heartbeat_timeout "
       "for the loss to show"},
      {{},
       F::kRestart,
       {},
       E::kRankFailedAlone,
       kRestartCounted,
       Stop(S::kRankExit),
       "no node was lost: a failure (one of --max_restarts); none left: the run fails"},
      {M::kFixed,
       F::kShrink,
       {},
       E::kRankFailedAlone,
       Stop(S::kRankExit),
       {},
       "the ranks left cannot go on (fewer than --min_ranks, or the loss was not published)"},
      {{},
       {},
       {},
       E::kPeerFailed,
       Stop(S::kPeerExit),
       {},
       "another node's failure ends the run with its status"},
      {{},
       {},
       {},
       E::kRestartRequested,
       kRestartCounted,
       Stop(S::kPeerExit),
       "another node's rank failed: this node restarts too (one of --max_restarts; never "
       "raised under shrink, whose --max_restarts is 0)"},
      {{},
       {},
       {},
       E::kStoreLost,
       Stop(S::kLauncher),
       {},
       "the meeting point is gone (node 0's launcher died or stalled, or etcd)"},
      {{}, {}, {}, E::kRanksSucceeded, kWait, {}, "for every other node's ranks"},
      {{}, {}, {}, E::kEveryNodeSucceeded, Stop(S::kSuccess), {}, "the run is done"},
      {M::kFixed,
       F::kRestart,
       {},
       E::kNodeLostOthersDone,
       Stop(S::kLauncher),
       {},
       "published as the run's failure: its ranks did not finish"},
      {M::kFixed,
       F::kShrink,
       {},
       E::kNodeLostOthersDone,
       kShrink,
       {},
       "its ranks are published as lost; the others' success ends the run (0)"},
      {M::kElastic,
       F::kRestart,
       {},
       E::kNodeLostOthersDone,
       Stop(S::kSuccess),
       {},
       "every other node succeeded: the run is done, naming the lost node (torchrun's finished "
       "agents leave too)"},
      {{},
       {},
       {},
       E::kSignalled,
       Stop(S::kSignal),
       {},
       "every rank stops; the other nodes are told"},
  };
  return rows;
}

template <typename T>
bool Matches(const std::optional<T>& pattern, T value) {
  return !pattern || *pattern == value;
}

}  // namespace

Mode ModeOf(const LaunchOptions& options) {
  return {options.elastic() ? M::kElastic : M::kFixed,
          options.shrink_on_failure ? F::kShrink : F::kRestart,
          options.rendezvous_on_etcd ? Meeting::kEtcd : Meeting::kTcp};
}

std::vector<Mode> AllModes() {
  std::vector<Mode> modes;
  for (M membership : {M::kFixed, M::kElastic}) {
    for (F on_failure : {F::kRestart, F::kShrink}) {
      for (Meeting meeting : {Meeting::kTcp, Meeting::kEtcd}) {
        modes.push_back({membership, on_failure, meeting});
      }
    }
  }
  return modes;
}

std::optional<std::string> RefusedMode(const Mode& mode) {
  if (mode.membership == M::kElastic && mode.on_failure == F::kShrink) {
    return "--on_failure=shrink with an elastic --nnodes=MIN:MAX: expected one of them (an "
           "elastic run meets again at a new size when a node is lost; shrink goes on in place "
           "at a fixed --nnodes=N)";
  }
  return std::nullopt;
}

std::vector<Event> AllEvents() {
  std::vector<Event> events;
  for (int event = 0; event <= static_cast<int>(E::kSignalled); ++event) {
    events.push_back(static_cast<Event>(event));
  }
  return events;
}

const char* EventName(Event event) {
  // In the enum's order.
  static constexpr const char* kNames[] = {"a node arrives while a round runs",
                                           "every member is ready",
                                           "this node declared lost",
                                           "a member never ready",
                                           "a node's keep-alive runs out",
                                           "a node's launcher connection closes",
                                           "a rank fails",
                                           "a rank failed, no node lost",
                                           "another node publishes the run's failure",
                                           "another node requests a restart",
                                           "the meeting point is lost",
                                           "this node's ranks succeed",
                                           "every node's ranks succeed",
                                           "a node lost once the others succeeded",
                                           "the launcher is signalled"};
  static_assert(std::size(kNames) == static_cast<size_t>(Event::kSignalled) + 1);
  return kNames[static_cast<size_t>(event)];
}

const char* ActionName(Action action) {
  // In the enum's order.
  static constexpr const char* kNames[] = {"go on",           "wait", "restart all", "new round",
                                           "shrink in place", "stop"};
  static_assert(std::size(kNames) == static_cast<size_t>(Action::kStop) + 1);
  return kNames[static_cast<size_t>(action)];
}

const char* StatusName(Status status) {
  // In the enum's order.
  static constexpr const char* kNames[] = {
      "", "0", "the rank's status", "the failing node's status", "1", "128 + signal"};
  static_assert(std::size(kNames) == static_cast<size_t>(Status::kSignal) + 1);
  return kNames[static_cast<size_t>(status)];
}

const std::vector<Row>& Table() { return Rows(); }

Decision Decide(const Mode& mode, Event event, bool restarts_left) {
  if (RefusedMode(mode)) throw std::logic_error("Decide: a refused mode");
  for (const Row& row : Rows()) {
    if (row.event != event || !Matches(row.membership, mode.membership) ||
        !Matches(row.on_failure, mode.on_failure) || !Matches(row.meeting, mode.meeting)) {
      continue;
    }
    if (row.decision.counts_as_restart && !restarts_left && row.restarts_spent) {
      return *row.restarts_spent;
    }
    return row.decision;
  }
  throw std::logic_error(std::string("Decide: no row for ") + EventName(event));
}

const char* StateName(RunState state) {
  // In the enum's order.
  static constexpr const char* kNames[] = {"initial", "healthy",   "unhealthy",
                                           "stopped", "succeeded", "failed"};
  static_assert(std::size(kNames) == static_cast<size_t>(RunState::kFailed) + 1);
  return kNames[static_cast<size_t>(state)];
}

RunState NextState(RunState state, Event event, const Decision& decision, int exit_status) {
  if (state == RunState::kSucceeded || state == RunState::kFailed) return state;  // final
  switch (decision.action) {
    case A::kGoOn:
      // The ranks start when the round closes (after a stop too: a restart
      // or a new round met again).
      return event == E::kRoundClosed ? RunState::kHealthy : state;
    case A::kWait:
      // A failed rank's cause is looked for; finished ranks wait as they are.
      return event == E::kRankFailed ? RunState::kUnhealthy : state;
    case A::kShrinkInPlace:
      return RunState::kHealthy;
    case A::kRestartAll:
    case A::kNewRound:
      return RunState::kStopped;
    case A::kStop:
      return exit_status == 0 ? RunState::kSucceeded : RunState::kFailed;
  }
  return state;
}

std::string TableAsMarkdown() {
  const auto any = [](const auto& pattern, const char* first, const char* second) {
    return !pattern ? std::string("any") : std::string(static_cast<int>(*pattern) ? second : first);
  };
  std::string text =
      "| `--nnodes` | `--on_failure` | meeting | event | action | counted | why |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const Row& row : Rows()) {
    std::string action = ActionName(row.decision.action);
    if (row.decision.status != S::kNone)
      action += std::string(" (") + StatusName(row.decision.status) + ")";
    if (row.restarts_spent) {
      action += std::string("; restarts spent: ") + ActionName(row.restarts_spent->action) + " (" +
                StatusName(row.restarts_spent->status) + ")";
    }
    text += "| " + any(row.membership, "N", "MIN:MAX") + " | " +
            any(row.on_failure, "restart", "shrink") + " | " + any(row.meeting, "TCP", "etcd") +
            " | " + EventName(row.event) + " | " + action + " | " +
            (row.decision.counts_as_restart ? "yes" : "no") + " | " + row.why + " |\n";
  }
  return text;
}

}  // namespace infini::launch::decisions
