// The record's transitions. Each reads which event happened from the record,
// asks decisions::Decide what the mode does about it, and applies that
// action to a copy of the record; none decides an action itself.
#include "infini/launch/run_record.h"

#include <algorithm>
#include <set>
#include <sstream>
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

bool IsLost(const RunRecord& record, const std::string& owner) {
  return std::any_of(record.lost.begin(), record.lost.end(),
                     [&](const LostSlot& lost) { return lost.owner == owner; });
}

const RunMember* FindMember(const RunRecord& record, const std::string& owner) {
  const auto found = std::find_if(record.members.begin(), record.members.end(),
                                  [&](const RunMember& member) { return member.owner == owner; });
  return found == record.members.end() ? nullptr : &*found;
}

bool Holds(const RunRecord& record, const std::string& owner) {
  const auto named = [&](const RunMember& member) { return member.owner == owner; };
  return FindMember(record, owner) != nullptr ||
         std::any_of(record.waiting.begin(), record.waiting.end(), named);
}

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

RunMember* FindIn(std::vector<RunMember>& members, const std::string& owner) {
  const auto found = std::find_if(members.begin(), members.end(),
                                  [&](const RunMember& member) { return member.owner == owner; });
  return found == members.end() ? nullptr : &*found;
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

// Slots: those given at arrival (a fixed world) and the requested ones,
// then the store's host, then arrival order.
void Close(RunRecord& record) {
  std::set<int> taken;
  for (RunMember& member : record.members) {
    if (member.slot < 0) member.slot = member.requested_slot;
    if (member.slot >= 0) taken.insert(member.slot);
  }
  std::vector<RunMember*> unplaced;
  for (RunMember& member : record.members) {
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
void OpenNextRound(RunRecord& record, const RunRules& rules, const std::string& gone, int gone_slot,
                   const std::string& why, WallTime now) {
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
  record.reopened_for = gone_slot;
  record.reopen_reason = why;
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

// A fixed world's slot for an arrival in its open round: the asked one,
// else the lowest free (the store's host arrives first: node 0).
int FixedSlot(const RunRecord& record, const RunRules& rules, const RunMember& arrival) {
  std::set<int> taken;
  for (const RunMember& member : record.members) taken.insert(member.slot);
  if (arrival.requested_slot >= 0) {
    for (const RunMember& member : record.members) {
      if (member.slot == arrival.requested_slot) {
        throw JoinRefused("two nodes claim --node_rank=" + std::to_string(arrival.requested_slot) +
                              ": " + member.owner + " and " + arrival.owner,
                          true);
      }
    }
    return arrival.requested_slot;
  }
  int slot = 0;
  while (taken.count(slot) != 0) ++slot;
  if (slot >= rules.max_nodes) {
    throw JoinRefused("the node " + arrival.owner + " joined as node " +
                          std::to_string(record.members.size() + 1) +
                          " of --nnodes=" + std::to_string(rules.max_nodes) + ": too many nodes",
                      true);
  }
  return slot;
}

}  // namespace

RecordStep Join(const RunRecord& record, const RunRules& rules, const RunMember& arrival,
                WallTime now) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  if (Holds(record, arrival.owner)) {
    return {record, record.round_closed ? kGoOnDecision : kWaitDecision};  // joined before
  }
  step.record = record;
  RunRecord& next = step.record;
  RunMember member = arrival;
  member.slot = -1;
  member.ready = member.done = member.left = false;
  const bool fixed = rules.mode.membership == decisions::Membership::kFixed;
  const bool shrink = rules.mode.on_failure == decisions::OnFailure::kShrink;
  if (!fixed) member.requested_slot = -1;  // elastic ranks by arrival (torchrun ignores it too)
  if (fixed && member.requested_slot >= rules.max_nodes) {
    throw JoinRefused("--node_rank=" + std::to_string(member.requested_slot) +
                          ": expected below --nnodes=" + std::to_string(rules.max_nodes),
                      true);
  }
  if (!next.round_closed) {
    if (fixed) {
      member.slot = FixedSlot(next, rules, member);
    } else if (next.join_deadline == WallTime{}) {
      next.join_deadline = now + rules.join_timeout;
    }
    next.members.push_back(member);
    CloseWhenFull(next, rules, now);
    step.decision = next.round_closed ? kGoOnDecision : kWaitDecision;
    return step;
  }
  step.decision = Decide(next, rules, Event::kNodeArrived);
  if (fixed) {
    if (shrink && TakeLostSlot(next, member)) return step;
    if (shrink) {
      throw JoinRefused("no node slot is free for the node " + member.owner +
                            ": every one of --nnodes=" + std::to_string(rules.max_nodes) +
                            " is taken and none was lost (under --on_failure=shrink a node that "
                            "arrives late replaces a lost one)",
                        false);
    }
    if (member.requested_slot >= 0) FixedSlot(next, rules, member);  // names the claim
    throw JoinRefused("the node " + member.owner + " joined as node " +
                          std::to_string(next.members.size() + 1) +
                          " of --nnodes=" + std::to_string(rules.max_nodes) + ": too many nodes",
                      true);
  }
  next.waiting.push_back(member);
  if (step.decision.action == Action::kNewRound &&
      static_cast<int>(next.members.size()) < rules.max_nodes) {
    OpenNextRound(next, rules, "", -1,
                  "a node arrived and waits to join round " + std::to_string(next.round + 1) +
                      " (--nnodes=" + std::to_string(rules.min_nodes) + ":" +
                      std::to_string(rules.max_nodes) + ")",
                  now);
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
    std::ostringstream seconds;
    seconds << static_cast<double>(rules.join_timeout.count()) / 1000;
    Stop(next, RunOutcome::kFailed, 1, -1,
         "timed out after " + seconds.str() + " s waiting for at least " +
             std::to_string(rules.min_nodes) +
             " nodes (--nnodes=" + std::to_string(rules.min_nodes) + ":" +
             std::to_string(rules.max_nodes) + ") in round " + std::to_string(next.round) + ": " +
             std::to_string(arrived) + " arrived (--rdzv_conf=join_timeout)");
    return {next, {Action::kStop, Status::kLauncher, false}};
  }
  return {next, kWaitDecision};
}

RecordStep Ready(const RunRecord& record, const RunRules& rules, const std::string& owner) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  step.record = record;
  RunRecord& next = step.record;
  // A fixed world's members know their slots before the round is full.
  if (!next.round_closed && rules.mode.membership == decisions::Membership::kElastic) {
    throw RunRecordError("ready: round " + std::to_string(next.round) + " is still open");
  }
  RequireMember(next, owner, "ready").ready = true;
  if (next.attempt_started) return {next, kGoOnDecision};
  if (!next.round_closed || !EveryLiveMember(next, &RunMember::ready)) {
    return {next, kWaitDecision};
  }
  next.attempt_started = true;
  step.decision = Decide(next, rules, Event::kRoundClosed);
  return step;
}

RecordStep NodeLost(const RunRecord& record, const RunRules& rules, const std::string& owner,
                    bool connection_closed, const std::string& how, WallTime now) {
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
  switch (step.decision.action) {
    case Action::kGoOn:
    case Action::kWait:
    case Action::kRestartAll:  // no row restarts for a loss
      break;
    case Action::kNewRound:
      if (next.round_closed) {
        OpenNextRound(next, rules, owner, lost.slot, how, now);
      } else {  // the open round goes on without it
        next.members.erase(next.members.begin() + (member - next.members.data()));
        CloseWhenFull(next, rules, now);
      }
      break;
    case Action::kShrinkInPlace:  // once published, Settle ends a run the others finished
      next.lost.push_back({lost.slot, lost.owner});
      break;
    case Action::kStop:
      Stop(next,
           step.decision.status == Status::kSuccess ? RunOutcome::kSucceeded : RunOutcome::kFailed,
           ExitStatus(next, step.decision.status, 1, 0), lost.slot, how);
      break;
  }
  return step;
}

RecordStep Restart(const RunRecord& record, const RunRules& rules, int attempt, bool counts) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  step = {record, {Action::kRestartAll, Status::kNone, counts}};
  if (record.attempt != attempt) return step;  // another node asked first
  if (counts) ++step.record.failure_restarts;
  StartAttemptAgain(step.record);
  return step;
}

RecordStep Fail(const RunRecord& record, const RunRules& rules, int node, int exit_status,
                const std::string& message) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  step = {record, {Action::kStop, Status::kRankExit, false}};
  Stop(step.record, RunOutcome::kFailed, exit_status, node, message);
  return step;
}

RecordStep Settle(const RunRecord& record, const RunRules& rules) {
  RecordStep step;
  if (Ended(record, rules, &step)) return step;
  step.record = record;
  if (!EveryLiveMember(record, &RunMember::done)) return {record, kGoOnDecision};
  step.decision = Decide(record, rules, Event::kEveryNodeSucceeded);
  Stop(step.record, RunOutcome::kSucceeded, 0, -1,
       "every node's ranks succeeded but those of the nodes lost");
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

RunRecord Leave(const RunRecord& record, const std::string& owner) {
  RunRecord next = record;
  if (RunMember* member = FindIn(next.members, owner)) member->left = true;
  return next;
}

}  // namespace record
}  // namespace infini::launch
