// The run's one state (torchrun's _RendezvousState): round, members and
// their slots, attempt, outcome, lost and replaced slots and deadlines in one
// record that launchers read and compare-and-set whole (run_record_store.h).
// The transitions are pure: a record, an event and the caller's clock in, the
// new record and the run's decision out. What each event means for a mode is
// decisions::Decide's (run_decisions.h): the transitions apply its actions
// and never decide on their own. docs/launcher.md, "Run states and
// decisions", describes the record.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "infini/launch/run_decisions.h"

namespace infini::launch {

// Wall-clock times: launchers on different hosts compare each other's
// keep-alives and deadlines (torchrun's last_heartbeats are wall times too).
// Held to the millisecond.
using WallTime = std::chrono::time_point<std::chrono::system_clock, std::chrono::milliseconds>;

// A launcher in the record, named by its identity ("host:pid").
struct RunMember {
  std::string owner;
  std::string host;
  // Its node rank once the round closed; -1 while the round is open (or it
  // waits for the next round).
  int slot = -1;
  // It hosts the ranks' store, so it is node 0 of the round it closes in.
  bool hosts_store = false;
  // It asked for this node rank (--node_rank; fixed runs only); -1: any.
  int requested_slot = -1;
  bool ready = false;  // ready to start the record's attempt
  bool done = false;   // its ranks all succeeded in the record's attempt
  // Its launcher exits, the run's outcome read: node 0, which hosts the
  // store, waits for every member to leave before it ends.
  bool left = false;
  bool operator==(const RunMember&) const = default;
};

// A slot whose owner was lost while the ranks ran on (--on_failure=shrink),
// and a slot a replacement node took since.
struct LostSlot {
  int slot = 0;
  std::string owner;
  bool operator==(const LostSlot&) const = default;
};
struct ReplacedSlot {
  int slot = 0;
  std::string lost_owner;
  std::string owner;
  bool operator==(const ReplacedSlot&) const = default;
};

enum class RunOutcome { kRunning, kSucceeded, kFailed };
const char* OutcomeName(RunOutcome outcome);

struct RunRecord {
  // One more at every stored change; 0: nothing stored yet.
  int64_t version = 0;
  // The membership's generation: an elastic run opens the next one when its
  // members change.
  int round = 0;
  bool round_closed = false;
  // The round's members: in arrival order while it is open, by slot once it
  // closed. Lost shrink slots keep their member (its owner names the loss).
  std::vector<RunMember> members;
  // Arrived after the round closed (torchrun's wait list).
  std::vector<RunMember> waiting;
  // Why this round opened (elastic): the slot in the previous round of the
  // node whose loss opened it (-1: nodes arrived) and the line that says so.
  int reopened_for = -1;
  std::string reopen_reason;
  int attempt = 0;
  // Restarts that --max_restarts counts so far (a new round is none).
  int failure_restarts = 0;
  // Every member was ready: the attempt's ranks run.
  bool attempt_started = false;
  std::vector<LostSlot> lost;
  std::vector<ReplacedSlot> replaced;
  RunOutcome outcome = RunOutcome::kRunning;
  int exit_status = 0;   // the run's, once it stopped
  int failed_node = -1;  // the slot whose failure stopped it (-1: none)
  std::string message;   // why it stopped, one line
  // Deadlines of the open round, absolute (the caller's clock when set);
  // unset: the epoch. join: fewer than the minimum arrived by then, the run
  // fails; last_call: the minimum arrived, the round closes then.
  WallTime join_deadline{};
  WallTime last_call_deadline{};
  bool operator==(const RunRecord&) const = default;
};

// What the transitions need of the run's options.
struct RunRules {
  decisions::Mode mode;
  int min_nodes = 1;  // --nnodes N: N and N
  int max_nodes = 1;
  int max_restarts = 0;
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
};

// A transition's result: the record to compare-and-set (equal to the input
// when nothing changed) and what the run does (the table's decision; kWait
// where the event leaves the run as it is).
struct RecordStep {
  RunRecord record;
  decisions::Decision decision;
};

// A member's transition named one that the record does not hold (it was
// lost, replaced, or never joined), or a join the run refuses: one line.
class RunRecordError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A join the run refuses; `stops_the_run`: the run cannot go on as asked
// (too many nodes, a node rank claimed twice), so the refusal is its
// failure too. A late node under shrink with no slot to take stops nothing.
class JoinRefused : public RunRecordError {
 public:
  JoinRefused(const std::string& message, bool stops)
      : RunRecordError(message), stops_the_run(stops) {}
  bool stops_the_run;
};

namespace record {

// What a launcher reads of the record: whether `owner` arrived (a member of
// the round, or waiting for the next), its entry among the round's members
// (nullptr: none), whether its slot was lost.
bool Holds(const RunRecord& record, const std::string& owner);
const RunMember* FindMember(const RunRecord& record, const std::string& owner);
bool IsLost(const RunRecord& record, const std::string& owner);

// A launcher arrives. In an open round it becomes a member (again: nothing
// changes). A fixed world gives it its node rank at once (the
// one it asked for, else the lowest free) and closes when full; an elastic
// round closes when full or, at the minimum, once the last call ends
// (CloseRound). Once the round closed: a fixed world lets a replacement take
// a lost shrink slot in place and refuses any other; an elastic run puts it
// on the wait list and, below the maximum, opens the next round for it
// (kNodeArrived). Throws JoinRefused.
RecordStep Join(const RunRecord& record, const RunRules& rules, const RunMember& arrival,
                WallTime now);
// Closes the open round when its rule holds (full, or the last call passed
// with the minimum; slots: requested ones kept, then the store's host, then
// arrival order); fails the run when the join deadline passed below the
// minimum. kGoOn when it closed, kWait while open, kStop at the deadline.
RecordStep CloseRound(const RunRecord& record, const RunRules& rules, WallTime now);
// A member is ready for the attempt; once the round closed and every member
// is (kRoundClosed), the attempt starts.
RecordStep Ready(const RunRecord& record, const RunRules& rules, const std::string& owner);
// `owner` was lost: its keep-alive ran out, or (`connection_closed`) its
// launcher's store connection closed; `how` is the line that says so (the
// run's message when it stops, the next round's reason). Which event that
// is comes from the record (joining, running, every other node done).
RecordStep NodeLost(const RunRecord& record, const RunRules& rules, const std::string& owner,
                    bool connection_closed, const std::string& how, WallTime now);
// Every node restarts `attempt` as the next one (a rank failed and the
// table said restart; `counts`: one of --max_restarts). Another node's
// request for the same attempt already did: nothing changes.
RecordStep Restart(const RunRecord& record, const RunRules& rules, int attempt, bool counts);
// The run stops with `exit_status`, as `node` (its slot; -1: none) says in
// `message`: a rank's failure the table stops on, a signal, a refused join.
// The first stop is the run's.
RecordStep Fail(const RunRecord& record, const RunRules& rules, int node, int exit_status,
                const std::string& message);
// `owner`'s ranks all succeeded; the run succeeds once every member's have.
RecordStep Finish(const RunRecord& record, const RunRules& rules, const std::string& owner);
// Shrink, once a loss was published to the ranks (the notice first, so that
// every launcher reads it before the outcome): the run succeeds if every
// member not lost is done.
RecordStep Settle(const RunRecord& record, const RunRules& rules);
// `owner`'s launcher exits, the run's outcome read (whatever it was).
RunRecord Leave(const RunRecord& record, const std::string& owner);

}  // namespace record

// The record as JSON, and back. Decoding refuses anything but what Encode
// writes (a field missing or of another type, an unknown outcome) with
// RunRecordError, one line naming the field.
std::string EncodeRunRecord(const RunRecord& record);
RunRecord DecodeRunRecord(const std::string& text);

}  // namespace infini::launch
