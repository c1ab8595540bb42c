// The record's transitions. Each reads which event happened from the record,
// asks decisions::Decide what the mode does about it, and applies that
// action to a copy of the record; none decides an action itself.
#include "infini/launch/run_record.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace infini::launch {

const char* OutcomeName(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::kRunning:
      return "running";
    case RunOutcome::kSucceeded:
      return "succeeded";
    case RunOutcome::kFailed:
      return "failed";
  }
  return "?";
}

namespace record {
namespace {

using decisions::Action;
using decisions::Decision;
using decisions::Event;
using decisions::Status;

Decision Decide(const RunRecord& record, const RunRules& rules, Event event) {
  return decisions::Decide(rules.mode, event, record.failure_restarts < rules.max_restarts);
}

const Decision kWaitDecision{Action::kWait, Status::kNone, false};
const Decision kGoOnDecision{Action::kGoOn, Status::kNone, false};

bool IsLost(const RunRecord& record, const std::string& owner) {
  return std::any_of(record.lost.begin(), record.lost.end(),
                     [&](const LostSlot& lost) { return lost.owner == owner; });
}

RunMember* FindIn(std::vector<RunMember>& members, const std::string& owner) {
  const auto found = std::find_if(members.begin(), members.end(),
                                  [&](const RunMember& member) { return member.owner == owner; });
  return found == members.end() ? nullptr : &*found;
}

bool Holds(const std::vector<RunMember>& members, const std::string& owner) {
  return std::any_of(members.begin(), members.end(),
                     [&](const RunMember& member) { return member.owner == owner; });
}

// A member of the round that was not lost; nullptr otherwise.
RunMember* LiveMember(RunRecord& record, const std::string& owner) {
  return IsLost(record, owner) ? nullptr : FindIn(record.members, owner);
}

RunMember& RequireMember(RunRecord& record, const std::string& owner, const char* what) {
  RunMember* member = LiveMember(record, owner);
  if (member == nullptr) {
    throw RunRecordError(std::string(what) + ": '" + owner + "' is not a member of round " +
                         std::to_string(record.round) + " of the run record");
  }
  return *member;
}

std::string NodeName(const RunMember& member) {
  return "node " + std::to_string(member.slot) + " (" + member.owner + ")";
}

bool EveryLiveMember(const RunRecord& record, bool RunMember::*flag) {
  return std::all_of(record.members.begin(), record.members.end(), [&](const RunMember& member) {
    return IsLost(record, member.owner) || member.*flag;
  });
}

// The first stop is the run's: a later one (another node's view of the
// same end) leaves it.
void Stop(RunRecord& record, RunOutcome outcome, int exit_status, int failed_node,
          std::string message) {
  if (record.outcome != RunOutcome::kRunning) return;
  record.outcome = outcome;
  record.exit_status = exit_status;
  record.failed_node = failed_node;
  record.message = std::move(message);
}

// What a stop's status is, as decisions::Status names it.
int ExitStatus(const RunRecord& record, Status status, int rank_status, int signal) {
  switch (status) {
    case Status::kSuccess:
    case Status::kNone:
      return 0;
    case Status::kRankExit:
      return rank_status;
    case Status::kPeerExit:
      return record.exit_status;
    case Status::kLauncher:
      return 1;
    case Status::kSignal:
      return 128 + signal;
  }
  return 1;
}

// A record whose run stopped: every transition reads the stop (another
// node's failure, or the run's success).
bool Ended(const RunRecord& record, const RunRules& rules, RecordStep* step) {
  if (record.outcome == RunOutcome::kRunning) return false;
  *step = {record, Decide(record, rules,
                          record.outcome == RunOutcome::kFailed ? Event::kPeerFailed
                                                                : Event::kEveryNodeSucceeded)};
  return true;
}

void StartAttemptAgain(RunRecord& record) {
  ++record.attempt;
  record.attempt_started = false;
  for (RunMember& member : record.members) member.ready = member.done = false;
}

// Slots: the requested ones, then the store's host, then arrival order.
void Close(RunRecord& record) {
  std::set<int> taken;
  for (const RunMember& member : record.members) {
    if (member.requested_slot >= 0) taken.insert(member.requested_slot);
  }
  std::vector<RunMember*> unplaced;
  for (RunMember& member : record.members) {
    member.slot = member.requested_slot;
    if (member.slot < 0) unplaced.push_back(&member);
  }
  std::stable_sort(unplaced.begin(), unplaced.end(), [](const RunMember* a, const RunMember* b) {
    return a->hosts_store && !b->hosts_store;
  });
  int next_slot = 0;
  for (RunMember* member : unplaced) {
    while (taken.count(next_slot) != 0) ++next_slot;
    member->slot = next_slot++;
  }
  std::sort(record.members.begin(), record.members.end(),
            [](const RunMember& a, const RunMember& b) { return a.slot < b.slot; });
  record.round_closed = true;
  record.join_deadline = record.last_call_deadline = WallTime{};
}

// An open round closes once full; at the minimum its last call starts (and
// is called off again below it).
void CloseWhenFull(RunRecord& record, const RunRules& rules, WallTime now) {
  const int arrived = static_cast<int>(record.members.size());
  if (arrived >= rules.max_nodes) {
    Close(record);
  } else if (arrived < rules.min_nodes) {
    record.last_call_deadline = WallTime{};
  } else if (record.last_call_deadline == WallTime{}) {
    record.last_call_deadline = now + rules.last_call_timeout;
  }
}

// An elastic run meets again: the round's members but `gone`, and those
// waiting, arrive in the next round (which starts the next attempt).
void OpenNextRound(RunRecord& record, const RunRules& rules, const std::string& gone,
                   WallTime now) {
  std::vector<RunMember> arrivals;
  for (RunMember& member : record.members) {
    if (member.owner != gone && !IsLost(record, member.owner)) arrivals.push_back(member);
  }
  arrivals.insert(arrivals.end(), record.waiting.begin(), record.waiting.end());
  for (RunMember& member : arrivals) {
    member.slot = -1;
    member.ready = member.done = false;
  }
  record.members = std::move(arrivals);
  record.waiting.clear();
  record.lost.clear();
  record.replaced.clear();
  ++record.round;
  record.round_closed = false;
  StartAttemptAgain(record);
  record.join_deadline = now + rules.join_timeout;
  record.last_call_deadline = WallTime{};
  CloseWhenFull(record, rules, now);
}

// A fixed world under shrink: `arrival` takes a lost slot in place (the one
// it asked for, else the lowest).
bool TakeLostSlot(RunRecord& record, const RunMember& arrival) {
  auto lost = std::find_if(record.lost.begin(), record.lost.end(), [&](const LostSlot& slot) {
    return arrival.requested_slot < 0 || slot.slot == arrival.requested_slot;
  });
  if (lost == record.lost.end()) return false;
  for (RunMember& member : record.members) {
    if (member.slot != lost->slot) continue;
    record.replaced.push_back({lost->slot, lost->owner, arrival.owner});
    const int slot = member.slot;
    member = arrival;
    member.slot = slot;
    member.ready = true;  // admitted in place: the attempt already runs
  }
  record.lost.erase(lost);
  return true;
}

}  // namespace

RecordStep Join(const RunRecord& record, const RunRules& rules, const RunMember& arrival,
                WallTime now) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  if (Holds(record.members, arrival.owner) || Holds(record.waiting, arrival.owner)) {
    return KeepAlive(record, rules, arrival.owner, now);  // joined before
  }
  step.record = record;
  RunRecord& next = step.record;
  RunMember member = arrival;
  member.slot = -1;
  member.ready = member.done = false;
  member.last_keep_alive = now;
  const bool fixed = rules.mode.membership == decisions::Membership::kFixed;
  if (!fixed) member.requested_slot = -1;  // elastic ranks by arrival (torchrun ignores it too)
  if (fixed && member.requested_slot >= rules.max_nodes) {
    throw RunRecordError("--node_rank=" + std::to_string(member.requested_slot) +
                         ": expected below --nnodes=" + std::to_string(rules.max_nodes));
  }
  if (!next.round_closed) {
    for (const RunMember& other : next.members) {
      if (member.requested_slot >= 0 && other.requested_slot == member.requested_slot) {
        throw RunRecordError("--node_rank=" + std::to_string(member.requested_slot) +
                             ": node rank already claimed by " + other.owner);
      }
    }
    next.members.push_back(member);
    if (next.join_deadline == WallTime{}) next.join_deadline = now + rules.join_timeout;
    CloseWhenFull(next, rules, now);
    step.decision = next.round_closed ? kGoOnDecision : kWaitDecision;
    return step;
  }
  step.decision = Decide(next, rules, Event::kNodeArrived);
  if (fixed) {
    const bool shrink = rules.mode.on_failure == decisions::OnFailure::kShrink;
    if (!(shrink && TakeLostSlot(next, member))) {
      throw RunRecordError(
          "node " + member.owner + " arrived past --nnodes=" + std::to_string(rules.max_nodes) +
          ": round " + std::to_string(next.round) + " closed with every slot held");
    }
    return step;
  }
  next.waiting.push_back(member);
  if (step.decision.action == Action::kNewRound &&
      static_cast<int>(next.members.size()) < rules.max_nodes) {
    OpenNextRound(next, rules, "", now);
  } else {
    step.decision = kGoOnDecision;  // full: it waits for a round with room
  }
  return step;
}

RecordStep CloseRound(const RunRecord& record, const RunRules& rules, WallTime now) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  step.record = record;
  RunRecord& next = step.record;
  if (next.round_closed) return {next, kGoOnDecision};
  const int arrived = static_cast<int>(next.members.size());
  const bool last_call_over =
      next.last_call_deadline != WallTime{} && now >= next.last_call_deadline;
  if (arrived >= rules.max_nodes || (arrived >= rules.min_nodes && last_call_over)) {
    Close(next);
    return {next, kGoOnDecision};
  }
  if (next.join_deadline != WallTime{} && now >= next.join_deadline) {
    Stop(next, RunOutcome::kFailed, 1, -1,
         "round " + std::to_string(next.round) + ": " + std::to_string(arrived) +
             " node(s) arrived by the join timeout, expected at least --nnodes minimum " +
             std::to_string(rules.min_nodes));
    return {next, {Action::kStop, Status::kLauncher, false}};
  }
  return {next, kWaitDecision};
}

RecordStep Ready(const RunRecord& record, const RunRules& rules, const std::string& owner) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  step.record = record;
  RunRecord& next = step.record;
  if (!next.round_closed) {
    throw RunRecordError("ready: round " + std::to_string(next.round) + " is still open");
  }
  RequireMember(next, owner, "ready").ready = true;
  if (next.attempt_started) return {next, kGoOnDecision};
  if (!EveryLiveMember(next, &RunMember::ready)) return {next, kWaitDecision};
  next.attempt_started = true;
  step.decision = Decide(next, rules, Event::kRoundClosed);
  return step;
}

RecordStep KeepAlive(const RunRecord& record, const RunRules& rules, const std::string& owner,
                     WallTime now) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  step.record = record;
  RunMember* member = LiveMember(step.record, owner);
  if (member == nullptr) member = FindIn(step.record.waiting, owner);
  if (member == nullptr) return {record, Decide(record, rules, Event::kOwnKeepAliveMissed)};
  member->last_keep_alive = now;
  step.decision = kGoOnDecision;
  return step;
}

std::vector<std::string> Overdue(const RunRecord& record, const RunRules& rules, WallTime now) {
  std::vector<std::string> overdue;
  const auto check = [&](const RunMember& member) {
    if (!IsLost(record, member.owner) && member.last_keep_alive + rules.keep_alive_timeout < now) {
      overdue.push_back(member.owner);
    }
  };
  for (const RunMember& member : record.members) check(member);
  for (const RunMember& member : record.waiting) check(member);
  return overdue;
}

RecordStep NodeLost(const RunRecord& record, const RunRules& rules, const std::string& owner,
                    bool connection_closed, WallTime now) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  step.record = record;
  RunRecord& next = step.record;
  step.decision = kGoOnDecision;
  auto waiting = std::find_if(next.waiting.begin(), next.waiting.end(),
                              [&](const RunMember& member) { return member.owner == owner; });
  if (waiting != next.waiting.end()) {
    next.waiting.erase(waiting);  // never a member: nothing else changes
    return step;
  }
  RunMember* member = LiveMember(next, owner);
  if (member == nullptr) return step;  // lost before (another node's look)
  const RunMember lost = *member;
  Event event = Event::kNodeLost;
  if (!next.attempt_started) {
    event = Event::kNodeLostWhileJoining;
  } else if (std::all_of(next.members.begin(), next.members.end(), [&](const RunMember& other) {
               return other.owner == owner || other.done || IsLost(next, other.owner);
             })) {
    event = Event::kNodeLostOthersDone;
  } else if (connection_closed) {
    event = Event::kConnectionClosed;
  }
  step.decision = Decide(next, rules, event);
  const std::string how =
      connection_closed
          ? "its launcher's store connection closed"
          : "no keep-alive for " + std::to_string(rules.keep_alive_timeout.count()) + " ms";
  switch (step.decision.action) {
    case Action::kGoOn:
    case Action::kWait:
    case Action::kRestartAll:  // no row restarts for a loss
      break;
    case Action::kNewRound:
      if (next.round_closed) {
        OpenNextRound(next, rules, owner, now);
      } else {  // the open round goes on without it
        next.members.erase(next.members.begin() + (member - next.members.data()));
        CloseWhenFull(next, rules, now);
      }
      break;
    case Action::kShrinkInPlace:
      next.lost.push_back({lost.slot, lost.owner});
      if (EveryLiveMember(next, &RunMember::done)) {
        Stop(next, RunOutcome::kSucceeded, 0, -1,
             NodeName(lost) + " was lost once every other node had succeeded");
      }
      break;
    case Action::kStop:
      Stop(next,
           step.decision.status == Status::kSuccess ? RunOutcome::kSucceeded : RunOutcome::kFailed,
           ExitStatus(next, step.decision.status, 1, 0), lost.slot,
           NodeName(lost) + " was lost: " + how);
      break;
  }
  return step;
}

RecordStep RankFailed(const RunRecord& record, const RunRules& rules, const std::string& owner,
                      int exit_status, bool no_node_lost) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  step.record = record;
  RunRecord& next = step.record;
  const RunMember member = RequireMember(next, owner, "rank failed");
  step.decision = Decide(next, rules, no_node_lost ? Event::kRankFailedAlone : Event::kRankFailed);
  if (step.decision.action == Action::kRestartAll) {
    if (step.decision.counts_as_restart) ++next.failure_restarts;
    StartAttemptAgain(next);
  } else if (step.decision.action == Action::kStop) {
    Stop(next, RunOutcome::kFailed, ExitStatus(next, step.decision.status, exit_status, 0),
         member.slot,
         "a rank of " + NodeName(member) + " exited with status " + std::to_string(exit_status));
  }
  return step;
}

RecordStep Finish(const RunRecord& record, const RunRules& rules, const std::string& owner) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  step.record = record;
  RunRecord& next = step.record;
  RequireMember(next, owner, "finish").done = true;
  if (!EveryLiveMember(next, &RunMember::done)) {
    step.decision = Decide(next, rules, Event::kRanksSucceeded);
    return step;
  }
  step.decision = Decide(next, rules, Event::kEveryNodeSucceeded);
  Stop(next, RunOutcome::kSucceeded, ExitStatus(next, step.decision.status, 0, 0), -1,
       "every node's ranks succeeded");
  return step;
}

RecordStep Signalled(const RunRecord& record, const RunRules& rules, const std::string& owner,
                     int signal) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  step.record = record;
  RunRecord& next = step.record;
  step.decision = Decide(next, rules, Event::kSignalled);
  const RunMember* member = LiveMember(next, owner);
  Stop(next, RunOutcome::kFailed, ExitStatus(next, step.decision.status, 0, signal),
       member == nullptr ? -1 : member->slot,
       "the launcher " + owner + " got signal " + std::to_string(signal));
  return step;
}

}  // namespace record
}  // namespace infini::launch
