// The run record's transitions and codec (run_record.h), without sockets or
// processes: each transition in the modes where it differs, asserting what
// the launchers read from the record afterwards (members and slots, attempt,
// round, outcome), and the JSON codec's round trip and refusals.
#include "infini/launch/run_record.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace infini::launch {
namespace {

using decisions::Action;
using decisions::Meeting;
using decisions::Membership;
using decisions::OnFailure;
using decisions::Status;
using std::chrono::seconds;

const WallTime kStart{std::chrono::milliseconds(1'700'000'000'000)};

RunRules Rules(Membership membership, OnFailure on_failure, int min_nodes, int max_nodes,
               Meeting meeting = Meeting::kTcp) {
  RunRules rules;
  rules.mode = {membership, on_failure, meeting};
  rules.min_nodes = min_nodes;
  rules.max_nodes = max_nodes;
  rules.max_restarts = 1;
  rules.last_call_timeout = seconds(30);
  rules.join_timeout = seconds(600);
  return rules;
}
RunRules Fixed(int nnodes, OnFailure on_failure = OnFailure::kRestart) {
  return Rules(Membership::kFixed, on_failure, nnodes, nnodes);
}
RunRules Elastic(int min_nodes, int max_nodes) {
  return Rules(Membership::kElastic, OnFailure::kRestart, min_nodes, max_nodes);
}

RunMember Node(const std::string& owner, bool hosts_store = false, int requested_slot = -1) {
  RunMember member;
  member.owner = owner;
  member.host = owner.substr(0, owner.find(':'));
  member.hosts_store = hosts_store;
  member.requested_slot = requested_slot;
  return member;
}

// The line a watch says a loss with.
std::string How(const std::string& owner) { return "the launcher " + owner + " went"; }

std::vector<std::string> Owners(const std::vector<RunMember>& members) {
  std::vector<std::string> owners;
  for (const RunMember& member : members) owners.push_back(member.owner);
  return owners;
}

// `owners` joined (the first hosts the store), in that order.
RunRecord Joined(const RunRules& rules, const std::vector<std::string>& owners) {
  RunRecord record;
  for (size_t i = 0; i < owners.size(); ++i) {
    record = record::Join(record, rules, Node(owners[i], i == 0), kStart).record;
  }
  return record;
}

// Joined (the round closed, at its last call if not full), every member
// ready: the attempt runs.
RunRecord Running(const RunRules& rules, const std::vector<std::string>& owners) {
  RunRecord record = Joined(rules, owners);
  record = record::CloseRound(record, rules, kStart + rules.last_call_timeout).record;
  for (const std::string& owner : owners) record = record::Ready(record, rules, owner).record;
  EXPECT_TRUE(record.attempt_started);
  return record;
}

// A fixed world numbers its nodes as they arrive (the TCP store's host
// arrives first: node 0), so each knows its node rank before the round is
// full; it closes when full, with no deadline of its own (--rdzv_timeout
// bounds the wait for the others' readiness).
TEST(RunRecordJoin, AFixedWorldNumbersNodesAsTheyArriveAndClosesWhenFull) {
  const RunRules rules = Fixed(3);
  RunRecord record;
  record = record::Join(record, rules, Node("a:1", true), kStart).record;
  const RecordStep second = record::Join(record, rules, Node("b:1"), kStart + seconds(1));
  EXPECT_EQ(second.decision.action, Action::kWait);
  EXPECT_FALSE(second.record.round_closed);
  EXPECT_EQ(second.record.members[1].slot, 1);
  EXPECT_EQ(second.record.join_deadline, WallTime{});
  const RecordStep third = record::Join(second.record, rules, Node("c:1"), kStart + seconds(2));
  EXPECT_EQ(third.decision.action, Action::kGoOn);
  ASSERT_TRUE(third.record.round_closed);
  EXPECT_EQ(Owners(third.record.members), (std::vector<std::string>{"a:1", "b:1", "c:1"}));
  for (int slot = 0; slot < 3; ++slot) EXPECT_EQ(third.record.members[slot].slot, slot);
}

TEST(RunRecordJoin, AnAskedNodeRankIsKeptAndAClaimedOrTooLargeOneRefused) {
  const RunRules rules = Fixed(2);
  RunRecord record = record::Join({}, rules, Node("a:1", true, 1), kStart).record;
  EXPECT_THROW(record::Join(record, rules, Node("b:1", false, 1), kStart), RunRecordError);
  try {
    record::Join(record, rules, Node("b:1", false, 2), kStart);
    FAIL() << "a node rank past --nnodes was accepted";
  } catch (const RunRecordError& error) {
    EXPECT_STREQ(error.what(), "--node_rank=2: expected below --nnodes=2");
  }
  record = record::Join(record, rules, Node("b:1"), kStart).record;
  ASSERT_TRUE(record.round_closed);
  EXPECT_EQ(Owners(record.members), (std::vector<std::string>{"b:1", "a:1"}));
}

TEST(RunRecordJoin, AnElasticRunRanksByArrivalWhateverNodeRankWasAsked) {
  const RunRules rules = Elastic(2, 2);
  RunRecord record = record::Join({}, rules, Node("a:1", false, 1), kStart).record;
  record = record::Join(record, rules, Node("b:1", false, 1), kStart).record;
  ASSERT_TRUE(record.round_closed);
  EXPECT_EQ(Owners(record.members), (std::vector<std::string>{"a:1", "b:1"}));
}

TEST(RunRecordJoin, JoiningAgainChangesNothing) {
  const RunRules rules = Fixed(2);
  const RunRecord record = record::Join({}, rules, Node("a:1"), kStart).record;
  const RecordStep again = record::Join(record, rules, Node("a:1"), kStart + seconds(5));
  EXPECT_EQ(again.record, record);
  EXPECT_EQ(again.decision.action, Action::kWait);
}

TEST(RunRecordJoin, AFixedWorldRefusesANodePastNnodes) {
  const RunRules rules = Fixed(2);
  const RunRecord record = Running(rules, {"a:1", "b:1"});
  EXPECT_THROW(record::Join(record, rules, Node("c:1"), kStart), RunRecordError);
}

TEST(RunRecordJoin, UnderShrinkAReplacementTakesTheLostSlotInPlace) {
  const RunRules rules = Fixed(3, OnFailure::kShrink);
  RunRecord record = Running(rules, {"a:1", "b:1", "c:1"});
  record = record::NodeLost(record, rules, "b:1", false, How("b:1"), kStart + seconds(20)).record;
  ASSERT_EQ(record.lost, (std::vector<LostSlot>{{1, "b:1"}}));
  const RecordStep step = record::Join(record, rules, Node("d:1"), kStart + seconds(30));
  EXPECT_EQ(step.decision.action, Action::kGoOn);
  EXPECT_TRUE(step.record.lost.empty());
  EXPECT_EQ(step.record.replaced, (std::vector<ReplacedSlot>{{1, "b:1", "d:1"}}));
  EXPECT_EQ(Owners(step.record.members), (std::vector<std::string>{"a:1", "d:1", "c:1"}));
  EXPECT_EQ(step.record.members[1].slot, 1);
  EXPECT_EQ(step.record.attempt, record.attempt);  // admitted in place, no restart
  // With no slot lost, a further node is refused.
  EXPECT_THROW(record::Join(step.record, rules, Node("e:1"), kStart), RunRecordError);
}

TEST(RunRecordJoin, AnElasticArrivalBelowMaxOpensTheNextRoundWithEveryone) {
  const RunRules rules = Elastic(1, 3);
  const RunRecord running = Running(rules, {"a:1", "b:1"});
  const RecordStep step = record::Join(running, rules, Node("c:1"), kStart + seconds(40));
  EXPECT_EQ(step.decision.action, Action::kNewRound);
  EXPECT_EQ(step.record.round, running.round + 1);
  EXPECT_EQ(step.record.attempt, running.attempt + 1);
  EXPECT_EQ(step.record.failure_restarts, 0);  // a membership change is no failure
  ASSERT_TRUE(step.record.round_closed);       // full at MAX: closed at once
  EXPECT_EQ(Owners(step.record.members), (std::vector<std::string>{"a:1", "b:1", "c:1"}));
  EXPECT_FALSE(step.record.attempt_started);
  EXPECT_TRUE(step.record.waiting.empty());
}

TEST(RunRecordJoin, AnElasticArrivalAtMaxWaitsForARoundWithRoom) {
  const RunRules rules = Elastic(1, 2);
  const RunRecord running = Running(rules, {"a:1", "b:1"});
  const RecordStep step = record::Join(running, rules, Node("c:1"), kStart);
  EXPECT_EQ(step.decision.action, Action::kGoOn);
  EXPECT_EQ(step.record.round, running.round);
  EXPECT_EQ(Owners(step.record.waiting), std::vector<std::string>{"c:1"});
  // A member lost: the next round takes the waiting node in.
  const RecordStep lost =
      record::NodeLost(step.record, rules, "b:1", true, How("b:1"), kStart + seconds(1));
  EXPECT_EQ(lost.decision.action, Action::kNewRound);
  EXPECT_EQ(Owners(lost.record.members), (std::vector<std::string>{"a:1", "c:1"}));
  EXPECT_TRUE(lost.record.round_closed);
}

TEST(RunRecordCloseRound, AtTheMinimumTheRoundClosesWhenTheLastCallEnds) {
  const RunRules rules = Elastic(2, 4);
  RunRecord record = Joined(rules, {"a:1", "b:1"});
  ASSERT_FALSE(record.round_closed);
  EXPECT_EQ(record.last_call_deadline, kStart + rules.last_call_timeout);
  EXPECT_EQ(record::CloseRound(record, rules, kStart + seconds(29)).decision.action, Action::kWait);
  const RecordStep closed = record::CloseRound(record, rules, kStart + seconds(30));
  EXPECT_EQ(closed.decision.action, Action::kGoOn);
  EXPECT_TRUE(closed.record.round_closed);
  EXPECT_EQ(closed.record.members.size(), 2u);
}

TEST(RunRecordCloseRound, BelowTheMinimumAtTheJoinDeadlineTheRunFails) {
  const RunRules rules = Elastic(2, 4);
  const RunRecord record = Joined(rules, {"a:1"});
  EXPECT_EQ(record.last_call_deadline, WallTime{});
  EXPECT_EQ(record::CloseRound(record, rules, kStart + seconds(599)).decision.action,
            Action::kWait);
  const RecordStep step = record::CloseRound(record, rules, kStart + rules.join_timeout);
  EXPECT_EQ(step.decision.action, Action::kStop);
  EXPECT_EQ(step.record.outcome, RunOutcome::kFailed);
  EXPECT_EQ(step.record.exit_status, 1);
  EXPECT_NE(step.record.message.find("in round 0: 1 arrived (--rdzv_conf=join_timeout)"),
            std::string::npos)
      << step.record.message;
}

TEST(RunRecordReady, TheAttemptStartsWhenEveryMemberIsReady) {
  const RunRules rules = Fixed(2);
  RunRecord record = Joined(rules, {"a:1"});
  // A fixed world's member is ready before the round is full; the attempt
  // waits for the rest. An elastic member has no node rank before the close.
  const RecordStep early = record::Ready(record, rules, "a:1");
  EXPECT_EQ(early.decision.action, Action::kWait);
  EXPECT_FALSE(early.record.attempt_started);
  EXPECT_THROW(record::Ready(Joined(Elastic(2, 3), {"a:1", "b:1"}), Elastic(2, 3), "a:1"),
               RunRecordError);
  record = Joined(rules, {"a:1", "b:1"});
  const RecordStep first = record::Ready(record, rules, "b:1");
  EXPECT_EQ(first.decision.action, Action::kWait);
  EXPECT_FALSE(first.record.attempt_started);
  const RecordStep second = record::Ready(first.record, rules, "a:1");
  EXPECT_EQ(second.decision.action, Action::kGoOn);
  EXPECT_TRUE(second.record.attempt_started);
  EXPECT_THROW(record::Ready(record, rules, "z:1"), RunRecordError);
}

TEST(RunRecordNodeLost, AFixedRestartRunFailsNamingTheNode) {
  const RunRules rules = Fixed(2);
  const RunRecord record = Running(rules, {"a:1", "b:1"});
  const RecordStep step = record::NodeLost(record, rules, "b:1", false, How("b:1"), kStart);
  EXPECT_EQ(step.decision.action, Action::kStop);
  EXPECT_EQ(step.record.outcome, RunOutcome::kFailed);
  EXPECT_EQ(step.record.exit_status, 1);
  EXPECT_EQ(step.record.failed_node, 1);
  EXPECT_EQ(step.record.message, How("b:1"));
  // Another node's look at the same loss reads the stop.
  const RecordStep again = record::NodeLost(step.record, rules, "b:1", true, How("b:1"), kStart);
  EXPECT_EQ(again.record, step.record);
  EXPECT_EQ(again.decision.status, Status::kPeerExit);
}

TEST(RunRecordNodeLost, ShrinkMarksTheSlotLostAndTheOthersGoOn) {
  const RunRules rules = Fixed(3, OnFailure::kShrink);
  const RunRecord record = Running(rules, {"a:1", "b:1", "c:1"});
  const RecordStep step = record::NodeLost(record, rules, "c:1", true, How("c:1"), kStart);
  EXPECT_EQ(step.decision.action, Action::kShrinkInPlace);
  EXPECT_EQ(step.record.outcome, RunOutcome::kRunning);
  EXPECT_EQ(step.record.lost, (std::vector<LostSlot>{{2, "c:1"}}));
  EXPECT_EQ(step.record.attempt, record.attempt);
  // Seen a second time (another node's look): nothing more changes.
  EXPECT_EQ(record::NodeLost(step.record, rules, "c:1", false, How("c:1"), kStart).record,
            step.record);
}

TEST(RunRecordNodeLost, ElasticMeetsAgainWithoutItUncounted) {
  const RunRules rules = Elastic(1, 3);
  const RunRecord record = Running(rules, {"a:1", "b:1", "c:1"});
  const RecordStep step =
      record::NodeLost(record, rules, "a:1", false, How("a:1"), kStart + seconds(20));
  EXPECT_EQ(step.decision.action, Action::kNewRound);
  EXPECT_EQ(step.record.round, 1);
  EXPECT_EQ(step.record.attempt, 1);
  EXPECT_EQ(step.record.failure_restarts, 0);
  EXPECT_FALSE(step.record.round_closed);  // below MAX: its last call runs
  EXPECT_EQ(step.record.last_call_deadline, kStart + seconds(20) + rules.last_call_timeout);
  const RunRecord closed = record::CloseRound(step.record, rules, kStart + seconds(50)).record;
  EXPECT_EQ(Owners(closed.members), (std::vector<std::string>{"b:1", "c:1"}));
  EXPECT_EQ(closed.members[0].slot, 0);
}

TEST(RunRecordNodeLost, BeforeTheAttemptStartsAFixedWorldStopsAndElasticLeavesTheRound) {
  const RunRules fixed = Fixed(2, OnFailure::kShrink);
  const RecordStep stopped =
      record::NodeLost(Joined(fixed, {"a:1", "b:1"}), fixed, "b:1", false, How("b:1"), kStart);
  EXPECT_EQ(stopped.decision.action, Action::kStop);
  EXPECT_EQ(stopped.record.outcome, RunOutcome::kFailed);
  const RunRules elastic = Elastic(2, 3);
  const RunRecord open = Joined(elastic, {"a:1", "b:1"});
  const RecordStep left = record::NodeLost(open, elastic, "b:1", false, How("b:1"), kStart);
  EXPECT_EQ(left.decision.action, Action::kNewRound);
  EXPECT_EQ(left.record.round, open.round);  // the open round goes on without it
  EXPECT_EQ(Owners(left.record.members), std::vector<std::string>{"a:1"});
  EXPECT_EQ(left.record.last_call_deadline, WallTime{});  // below the minimum again
}

TEST(RunRecordNodeLost, AClosedConnectionIsNoLossOnEtcdAndAtOnceOnTcp) {
  const RunRules etcd = Rules(Membership::kFixed, OnFailure::kRestart, 2, 2, Meeting::kEtcd);
  const RunRecord on_etcd = Running(etcd, {"a:1", "b:1"});
  const RecordStep ignored = record::NodeLost(on_etcd, etcd, "b:1", true, How("b:1"), kStart);
  EXPECT_EQ(ignored.decision.action, Action::kGoOn);
  EXPECT_EQ(ignored.record, on_etcd);
  const RunRules tcp = Fixed(2);
  const RecordStep lost =
      record::NodeLost(Running(tcp, {"a:1", "b:1"}), tcp, "b:1", true, How("b:1"), kStart);
  EXPECT_EQ(lost.record.outcome, RunOutcome::kFailed);
  EXPECT_EQ(lost.record.message, How("b:1"));
}

TEST(RunRecordNodeLost, OnceEveryOtherNodeSucceededEachModeEndsItsWay) {
  const auto lost_last = [](const RunRules& rules) {
    RunRecord record = Running(rules, {"a:1", "b:1"});
    record = record::Finish(record, rules, "a:1").record;
    return record::NodeLost(record, rules, "b:1", false, How("b:1"), kStart).record;
  };
  const RunRecord elastic = lost_last(Elastic(1, 2));
  EXPECT_EQ(elastic.outcome, RunOutcome::kSucceeded);
  EXPECT_NE(elastic.message.find(How("b:1")), std::string::npos);
  // Shrink: the loss is published first; then Settle ends the run.
  const RunRecord shrink = lost_last(Fixed(2, OnFailure::kShrink));
  EXPECT_EQ(shrink.outcome, RunOutcome::kRunning);
  EXPECT_EQ(shrink.lost, (std::vector<LostSlot>{{1, "b:1"}}));
  const RecordStep settled = record::Settle(shrink, Fixed(2, OnFailure::kShrink));
  EXPECT_EQ(settled.record.outcome, RunOutcome::kSucceeded);
  EXPECT_EQ(settled.decision.action, Action::kStop);
  EXPECT_EQ(settled.decision.status, Status::kSuccess);
  const RunRecord restart = lost_last(Fixed(2));
  EXPECT_EQ(restart.outcome, RunOutcome::kFailed);
  EXPECT_EQ(restart.exit_status, 1);
}

TEST(RunRecordRestart, EveryNodeRestartsTheAttemptOnceHoweverManyAsk) {
  const RunRules rules = Fixed(2);
  const RunRecord record = Running(rules, {"a:1", "b:1"});
  const RecordStep restarted = record::Restart(record, rules, 0, true);
  EXPECT_EQ(restarted.decision.action, Action::kRestartAll);
  EXPECT_EQ(restarted.record.attempt, 1);
  EXPECT_EQ(restarted.record.failure_restarts, 1);
  EXPECT_FALSE(restarted.record.attempt_started);
  EXPECT_FALSE(restarted.record.members[0].ready);
  // The other node's request for attempt 0 comes second: nothing more.
  EXPECT_EQ(record::Restart(restarted.record, rules, 0, true).record, restarted.record);
  const RecordStep uncounted = record::Restart(record, rules, 0, false);
  EXPECT_EQ(uncounted.record.failure_restarts, 0);
  EXPECT_EQ(uncounted.record.attempt, 1);
}

TEST(RunRecordFail, TheFirstStopIsTheRunsAndEveryTransitionReadsIt) {
  const RunRules rules = Elastic(1, 2);
  const RunRecord record = Running(rules, {"a:1", "b:1"});
  const RecordStep step = record::Fail(record, rules, 1, 143, "node 1 got SIGTERM");
  EXPECT_EQ(step.record.outcome, RunOutcome::kFailed);
  EXPECT_EQ(step.record.exit_status, 143);
  EXPECT_EQ(step.record.failed_node, 1);
  EXPECT_EQ(step.record.message, "node 1 got SIGTERM");
  EXPECT_EQ(record::Fail(step.record, rules, 0, 7, "later").record, step.record);
  const RecordStep other = record::Finish(step.record, rules, "a:1");
  EXPECT_EQ(other.decision.action, Action::kStop);
  EXPECT_EQ(other.decision.status, Status::kPeerExit);
  EXPECT_EQ(record::Restart(step.record, rules, 0, true).record, step.record);
}

TEST(RunRecordLeave, AMemberLeavesAfterTheOutcomeAndOnlyItIsMarked) {
  const RunRules rules = Fixed(2);
  RunRecord record = Running(rules, {"a:1", "b:1"});
  record = record::Finish(record, rules, "a:1").record;
  record = record::Finish(record, rules, "b:1").record;
  ASSERT_EQ(record.outcome, RunOutcome::kSucceeded);
  const RunRecord left = record::Leave(record, "b:1");
  EXPECT_FALSE(left.members[0].left);
  EXPECT_TRUE(left.members[1].left);
  EXPECT_EQ(record::Leave(record, "z:9"), record);
}

TEST(RunRecordFinish, TheRunSucceedsWhenEveryLiveMemberIsDone) {
  const RunRules rules = Fixed(3, OnFailure::kShrink);
  RunRecord record = Running(rules, {"a:1", "b:1", "c:1"});
  record = record::NodeLost(record, rules, "c:1", false, How("c:1"), kStart).record;
  const RecordStep first = record::Finish(record, rules, "a:1");
  EXPECT_EQ(first.decision.action, Action::kWait);
  EXPECT_EQ(first.record.outcome, RunOutcome::kRunning);
  EXPECT_EQ(record::Settle(first.record, rules).record, first.record) << "b:1 still runs";
  const RecordStep last = record::Finish(first.record, rules, "b:1");
  EXPECT_EQ(last.decision.action, Action::kStop);
  EXPECT_EQ(last.decision.status, Status::kSuccess);
  EXPECT_EQ(last.record.outcome, RunOutcome::kSucceeded);
  EXPECT_EQ(last.record.exit_status, 0);
  EXPECT_THROW(record::Finish(first.record, rules, "c:1"), RunRecordError);  // it was lost
}

RunRecord EveryFieldSet() {
  RunRecord record;
  record.version = 9'000'000'000;
  record.round = 2;
  record.round_closed = true;
  RunMember member = Node("a:1", true, 0);
  member.slot = 0;
  member.ready = member.done = member.left = true;
  record.members = {member, Node("b:2")};
  record.members[1].slot = 1;
  record.waiting = {Node("c:3")};
  record.reopened_for = 1;
  record.reopen_reason = "node 1 lost";
  record.attempt = 4;
  record.failure_restarts = 1;
  record.attempt_started = true;
  record.lost = {{1, "b:2"}};
  record.replaced = {{3, "x:1", "y:1"}};
  record.outcome = RunOutcome::kFailed;
  record.exit_status = 137;
  record.failed_node = 1;
  record.message = "node 1 (b:2) was lost: \"quoted\"\n";
  record.join_deadline = kStart + seconds(600);
  record.last_call_deadline = kStart + seconds(30);
  return record;
}

TEST(RunRecordCodec, EveryFieldSurvivesTheRoundTrip) {
  const RunRecord record = EveryFieldSet();
  EXPECT_EQ(DecodeRunRecord(EncodeRunRecord(record)), record);
  EXPECT_EQ(DecodeRunRecord(EncodeRunRecord(RunRecord{})), RunRecord{});
}

TEST(RunRecordCodec, TextThatIsNotUtf8IsWrittenWithReplacementCharacters) {
  RunRecord record;
  record.message = "rank said \xff\xfe";
  EXPECT_EQ(DecodeRunRecord(EncodeRunRecord(record)).message, "rank said \xEF\xBF\xBD\xEF\xBF\xBD");
}

std::string RefusalOf(const std::string& text) {
  try {
    DecodeRunRecord(text);
  } catch (const RunRecordError& error) {
    return error.what();
  }
  return "accepted";
}

// `text` with the first occurrence of `from` replaced by `to`.
std::string Edited(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(RunRecordCodec, MalformedInputIsRefusedInOneLineNamingTheField) {
  const std::string good = EncodeRunRecord(EveryFieldSet());
  EXPECT_EQ(RefusalOf("{\"version\":"),
            "run record: expected a JSON object, got 11 bytes that "
            "are not one");
  EXPECT_EQ(RefusalOf("[1]"), "run record: expected a JSON object, got 3 bytes that are not one");
  EXPECT_EQ(RefusalOf(Edited(good, "\"round\":2,", "")),
            "run record: 'round': expected a field (it is missing)");
  EXPECT_EQ(RefusalOf(Edited(good, "\"slot\":0", "\"slot\":\"0\"")),
            "run record: 'members[0].slot': expected an integer");
  EXPECT_EQ(RefusalOf(Edited(good, "\"slot\":0", "\"slot\":-2")),
            "run record: 'members[0].slot': expected an integer from -1");
  EXPECT_EQ(RefusalOf(Edited(good, "\"failed\"", "\"maybe\"")),
            "run record: 'outcome': expected running, succeeded or failed");
  EXPECT_EQ(RefusalOf(Edited(good, "\"lost\":[{", "\"lost\":[7,{")),
            "run record: 'lost[0]': expected an object");
  EXPECT_EQ(RefusalOf(Edited(good, "\"version\":9000000000", "\"version\":-1")),
            "run record: 'version': expected a non-negative 64-bit integer");
  EXPECT_EQ(RefusalOf(Edited(good, "\"round_closed\":true", "\"round_closed\":1")),
            "run record: 'round_closed': expected true or false");
  for (const std::string& refusal :
       {RefusalOf("x"),
        RefusalOf(Edited(good, "\"waiting\":[", "\"waiting\":{\"a\":[]},\"w\":["))}) {
    EXPECT_EQ(refusal.find('\n'), std::string::npos) << refusal;
  }
}

}  // namespace
}  // namespace infini::launch
