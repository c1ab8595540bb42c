// The key-value table on its own, without sockets: its answers, its waiters,
// its deadlines, and that a long chain of wake-ups never recurses.
#include "key_value_table.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "store_test_util.h"

namespace infini::rendezvous {
namespace {

using wire::MessageType;
using wire::Request;

Request Make(MessageType type, std::vector<std::string> keys, int64_t number = 0,
             std::string value = {}) {
  Request request;
  request.type = type;
  request.keys = std::move(keys);
  request.number = number;
  request.value = std::move(value);
  return request;
}

Request Set(const std::string& key, const std::string& value) {
  return Make(MessageType::kSet, {key}, 0, value);
}
Request Get(const std::string& key, int64_t timeout_ms) {
  return Make(MessageType::kGet, {key}, timeout_ms);
}
Request Wait(std::vector<std::string> keys, int64_t timeout_ms) {
  return Make(MessageType::kWait, std::move(keys), timeout_ms);
}

class KeyValueTableTest : public ::testing::Test {
 protected:
  // The answers made since the last call.
  std::deque<Completion> Answers() { return table_.TakeCompletions(); }

  KeyValueTable table_;
};

TEST_F(KeyValueTableTest, GetOfAPresentKeyIsAnsweredAtOnce) {
  EXPECT_TRUE(table_.Handle(1, Set("k", "v"), 0));
  EXPECT_TRUE(table_.Handle(2, Get("k", 1000), 0));
  const auto answers = Answers();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].client, 1u);
  EXPECT_EQ(answers[0].reply.type, MessageType::kOk);
  EXPECT_EQ(answers[1].client, 2u);
  ASSERT_EQ(answers[1].reply.type, MessageType::kValue);
  EXPECT_EQ(*answers[1].reply.value, "v");
}

TEST_F(KeyValueTableTest, GetOfAMissingKeyWaitsUntilItIsSet) {
  EXPECT_FALSE(table_.Handle(1, Get("k", 1000), 0));
  EXPECT_TRUE(table_.IsWaiting(1));
  EXPECT_TRUE(Answers().empty());
  table_.Handle(2, Set("k", "late"), 10);
  const auto answers = Answers();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[1].client, 1u);
  EXPECT_EQ(*answers[1].reply.value, "late");
  EXPECT_FALSE(table_.IsWaiting(1));
  EXPECT_EQ(table_.num_waiters(), 0u);
  EXPECT_EQ(table_.num_registrations(), 0u);
}

TEST_F(KeyValueTableTest, WaitOnSeveralKeysEndsWithTheLastOneAndCountsDuplicatesOnce) {
  EXPECT_FALSE(table_.Handle(1, Wait({"a", "b", "a", "c"}, 1000), 0));
  EXPECT_EQ(table_.num_registrations(), 3u);
  table_.Handle(2, Set("a", "1"), 0);
  table_.Handle(2, Set("b", "1"), 0);
  EXPECT_TRUE(table_.IsWaiting(1));
  table_.Handle(2, Set("c", "1"), 0);
  EXPECT_FALSE(table_.IsWaiting(1));
  const auto answers = Answers();
  ASSERT_EQ(answers.size(), 4u);
  EXPECT_EQ(answers[3].client, 1u);
  EXPECT_EQ(answers[3].reply.type, MessageType::kOk);
  EXPECT_EQ(table_.num_registrations(), 0u);
}

TEST_F(KeyValueTableTest, WaitersTimeOutAtTheirDeadlineOnlyAndLeaveNoRegistration) {
  table_.Handle(1, Wait({"a", "b"}, 100), 1000);
  table_.Handle(2, Get("a", 50), 1000);
  EXPECT_EQ(table_.NextDeadline(), 1050);
  table_.ExpireWaiters(1049);
  EXPECT_TRUE(Answers().empty());
  table_.ExpireWaiters(1050);
  auto answers = Answers();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].client, 2u);
  EXPECT_EQ(answers[0].reply.type, MessageType::kTimeout);
  EXPECT_EQ(table_.NextDeadline(), 1100);
  table_.ExpireWaiters(5000);
  answers = Answers();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].client, 1u);
  EXPECT_EQ(table_.num_waiters(), 0u);
  EXPECT_EQ(table_.num_registrations(), 0u);
  EXPECT_EQ(table_.NextDeadline(), -1);
  // The key of an expired waiter wakes nobody.
  table_.Handle(3, Set("a", "1"), 5000);
  EXPECT_EQ(Answers().size(), 1u);
}

TEST_F(KeyValueTableTest, AForgottenClientIsNeverAnswered) {
  table_.Handle(1, Get("k", 1000), 0);
  table_.Handle(2, Get("k", 1000), 0);
  table_.Forget(1);
  table_.Handle(3, Set("k", "v"), 0);
  for (const Completion& answer : Answers()) EXPECT_NE(answer.client, 1u);
  EXPECT_EQ(table_.num_waiters(), 0u);
}

TEST_F(KeyValueTableTest, AddCountsAndRefusesNonIntegersAndOverflow) {
  table_.Handle(1, Make(MessageType::kAdd, {"n"}, 5), 0);
  table_.Handle(1, Make(MessageType::kAdd, {"n"}, -2), 0);
  table_.Handle(1, Set("text", "abc"), 0);
  table_.Handle(1, Make(MessageType::kAdd, {"text"}, 1), 0);
  table_.Handle(1, Set("big", std::to_string(INT64_MAX)), 0);
  table_.Handle(1, Make(MessageType::kAdd, {"big"}, 1), 0);
  const auto answers = Answers();
  ASSERT_EQ(answers.size(), 6u);
  EXPECT_EQ(answers[0].reply.integer, 5);
  EXPECT_EQ(answers[1].reply.integer, 3);
  EXPECT_EQ(answers[3].reply.type, MessageType::kError);
  EXPECT_NE(answers[3].reply.error.find("not an integer"), std::string::npos);
  EXPECT_EQ(answers[5].reply.type, MessageType::kError);
  EXPECT_NE(answers[5].reply.error.find("overflows"), std::string::npos);
}

TEST_F(KeyValueTableTest, CompareSetFollowsC10dAndWakesWaiters) {
  Request missing = Make(MessageType::kCompareSet, {"leader"}, 0, "rank0");
  missing.expected = "rank9";
  table_.Handle(1, missing, 0);
  table_.Handle(2, Get("leader", 1000), 0);
  Request claim = Make(MessageType::kCompareSet, {"leader"}, 0, "rank0");
  table_.Handle(1, claim, 0);
  const auto answers = Answers();
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(*answers[0].reply.value, "rank9");  // missing key, other expected: unchanged
  EXPECT_EQ(*answers[1].reply.value, "rank0");
  EXPECT_EQ(answers[2].client, 2u);
  EXPECT_EQ(*answers[2].reply.value, "rank0");
}

TEST_F(KeyValueTableTest, DeleteCheckAndNumKeys) {
  table_.Handle(1, Set("a", ""), 0);
  table_.Handle(1, Make(MessageType::kCheck, {"a", "b"}), 0);
  table_.Handle(1, Make(MessageType::kDelete, {"a"}), 0);
  table_.Handle(1, Make(MessageType::kDelete, {"a"}), 0);
  table_.Handle(1, Make(MessageType::kNumKeys, {}), 0);
  const auto answers = Answers();
  ASSERT_EQ(answers.size(), 5u);
  EXPECT_EQ(answers[1].reply.integer, 0);  // "b" is missing
  EXPECT_EQ(answers[2].reply.integer, 1);
  EXPECT_EQ(answers[3].reply.integer, 0);
  EXPECT_EQ(answers[4].reply.integer, 0);
}

// Waiter i waits for key i and, once woken, sets key i+1: the chain that
// overflowed the old server's stack. The table only fills its outbox; the
// caller's loop (as the server's Pump) drives the chain to its end. Under a
// sanitizer a tenth: the depth is proven by the main suite; the sanitizer
// looks at the table's memory, which a shorter chain uses the same way.
TEST_F(KeyValueTableTest, AChainOf200000WakeUpsIsDrivenIterativelyByTheCaller) {
#ifdef INFINI_STORE_TEST_SANITIZED
  constexpr int kChain = 20'000;
#else
  constexpr int kChain = 200'000;
#endif
  for (int i = 0; i < kChain; ++i) {
    ASSERT_FALSE(table_.Handle(static_cast<ClientId>(i), Get("k" + std::to_string(i), 60000), 0));
  }
  table_.Handle(kChain, Set("k0", "go"), 0);
  int woken = 0;
  while (table_.HasCompletions()) {
    for (const Completion& answer : Answers()) {
      // Only a Get's answer is a wake-up; the Sets' own kOk answers are not.
      if (answer.reply.type != MessageType::kValue) continue;
      ++woken;
      const auto next = static_cast<int>(answer.client) + 1;
      table_.Handle(answer.client, Set("k" + std::to_string(next), "go"), 0);
    }
  }
  EXPECT_EQ(woken, kChain);
  EXPECT_EQ(table_.num_waiters(), 0u);
  EXPECT_EQ(table_.num_keys(), static_cast<size_t>(kChain) + 1);
}

// Stored bytes are keys (with their overhead) and live values, also a value
// that a reply still carries after its key was overwritten; a Set beyond
// max_stored_bytes is an error naming it and changes nothing.
TEST(KeyValueTableLimitsTest, StoredBytesCountKeysAndLiveValuesAndTheCapRefusesNamingIt) {
  TableLimits limits;
  limits.max_stored_bytes = 1000 + 2 * KeyValueTable::kKeyOverheadBytes;
  KeyValueTable table(limits);
  const std::string half(500, 'x');
  EXPECT_TRUE(table.Handle(1, Set("a", half), 0));
  EXPECT_EQ(table.stored_bytes(), 1 + KeyValueTable::kKeyOverheadBytes + 500);
  EXPECT_TRUE(table.Handle(1, Set("b", half), 0));
  ASSERT_EQ(table.TakeCompletions().back().reply.type, MessageType::kError);
  EXPECT_FALSE(table.Handle(2, Get("b", 0), 0));  // not stored: the Get waits
  table.Forget(2);
  // A reply being sent keeps the old value of "a" alive: still counted.
  EXPECT_TRUE(table.Handle(1, Get("a", 0), 0));
  std::deque<Completion> unsent = table.TakeCompletions();
  EXPECT_TRUE(table.Handle(1, Set("a", "small"), 0));
  EXPECT_EQ(table.stored_bytes(), 1 + KeyValueTable::kKeyOverheadBytes + 500 + 5);
  EXPECT_TRUE(table.Handle(1, Set("c", std::string(600, 'y')), 0));
  const std::deque<Completion> answers = table.TakeCompletions();
  ASSERT_EQ(answers.back().reply.type, MessageType::kError);
  EXPECT_NE(answers.back().reply.error.find("store full: setting key 'c' to 600 bytes"),
            std::string::npos)
      << answers.back().reply.error;
  EXPECT_NE(answers.back().reply.error.find("max_stored_bytes (1192)"), std::string::npos);
  unsent.clear();  // the reply went out
  EXPECT_EQ(table.stored_bytes(), 1 + KeyValueTable::kKeyOverheadBytes + 5);
  EXPECT_TRUE(table.Handle(1, Set("c", std::string(600, 'y')), 0));
  EXPECT_EQ(table.TakeCompletions().back().reply.type, MessageType::kOk);
  EXPECT_TRUE(table.Handle(1, Make(MessageType::kDelete, {"a"}), 0));
  EXPECT_TRUE(table.Handle(1, Make(MessageType::kDelete, {"c"}), 0));
  EXPECT_EQ(table.stored_bytes(), 0u);
}

// A waiter's bookkeeping is counted while it waits (per registration, and
// per waited-for key once) and given back when it ends; beyond
// max_waiter_bytes a Get or Wait is answered with an error instead.
TEST(KeyValueTableLimitsTest, WaiterBytesAreCountedGivenBackAndCapped) {
  TableLimits limits;
  limits.max_waiter_bytes = 4096;
  KeyValueTable table(limits);
  const size_t one_key = KeyValueTable::kWaiterOverheadBytes + KeyValueTable::kRegistrationBytes +
                         KeyValueTable::kWaitedKeyOverheadBytes + 1;
  EXPECT_FALSE(table.Handle(1, Get("k", 1000), 0));
  EXPECT_EQ(table.waiter_bytes(), one_key);
  EXPECT_FALSE(table.Handle(2, Get("k", 1000), 0));  // the key's entry is shared
  EXPECT_EQ(table.waiter_bytes(),
            one_key + KeyValueTable::kWaiterOverheadBytes + KeyValueTable::kRegistrationBytes);
  std::vector<std::string> many;
  for (int i = 0; i < 40; ++i) many.push_back("m" + std::to_string(i));
  EXPECT_TRUE(table.Handle(3, Wait(many, 1000), 0));
  const std::deque<Completion> refused = table.TakeCompletions();
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].reply.type, MessageType::kError);
  EXPECT_NE(refused[0].reply.error.find("max_buffered_bytes"), std::string::npos)
      << refused[0].reply.error;
  EXPECT_FALSE(table.IsWaiting(3));
  table.Handle(4, Set("k", "v"), 0);
  EXPECT_EQ(table.waiter_bytes(), 0u);
  EXPECT_FALSE(table.Handle(1, Wait({"x", "y"}, 10), 0));
  table.ExpireWaiters(10);
  EXPECT_EQ(table.waiter_bytes(), 0u);
  EXPECT_FALSE(table.Handle(1, Wait({"x", "y"}, 10), 0));
  table.Forget(1);
  EXPECT_EQ(table.waiter_bytes(), 0u);
}

}  // namespace
}  // namespace infini::rendezvous
