// infini::ccl::MemoryBootstrapStore: the process-local store that thread
// ranks share (and CommInitAll uses); every wait ends at its deadline.
#include "infini/ccl/memory_bootstrap_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using infini::ccl::Error;
using infini::ccl::MemoryBootstrapStore;
using std::chrono::milliseconds;

// The store's Error for `body`, or a failure when it does not throw one.
template <typename Body>
Error ErrorOf(Body&& body) {
  try {
    body();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "expected an infini::ccl::Error";
  return Error(infiniCclSuccess, "");
}

TEST(MemoryBootstrapStore, GetWaitsForAKeyAnotherThreadSets) {
  MemoryBootstrapStore store;
  std::thread writer([&] { store.Set("rank/1", "address"); });
  EXPECT_EQ(store.Get("rank/1", std::chrono::seconds(30)), "address");
  writer.join();
}

TEST(MemoryBootstrapStore, GetOfAKeyNeverSetTimesOutNamingKeyAndTimeout) {
  MemoryBootstrapStore store;
  const Error error = ErrorOf([&] { store.Get("never", milliseconds(20)); });
  EXPECT_EQ(error.code(), infiniCclTimeout);
  EXPECT_NE(std::string(error.what()).find("'never' not set after 20 ms"), std::string::npos)
      << error.what();
}

TEST(MemoryBootstrapStore, NegativeTimeoutIsTheStoresDefault) {
  MemoryBootstrapStore store(milliseconds(30));
  const Error error = ErrorOf([&] { store.Wait({"a"}, milliseconds(-1)); });
  EXPECT_EQ(error.code(), infiniCclTimeout);
  EXPECT_NE(std::string(error.what()).find("after 30 ms"), std::string::npos) << error.what();
}

TEST(MemoryBootstrapStore, WaitNamesTheFirstMissingKeyAndReturnsOnceAllAreSet) {
  MemoryBootstrapStore store;
  store.Set("a", "1");
  const Error error = ErrorOf([&] { store.Wait({"a", "b"}, milliseconds(10)); });
  EXPECT_NE(std::string(error.what()).find("'b'"), std::string::npos) << error.what();
  std::thread writer([&] { store.Set("b", "2"); });
  store.Wait({"a", "b"}, std::chrono::seconds(30));
  writer.join();
  EXPECT_EQ(store.Keys(), (std::set<std::string>{"a", "b"}));
}

TEST(MemoryBootstrapStore, TryGetAnswersAtOnce) {
  MemoryBootstrapStore store;
  EXPECT_EQ(store.TryGet("k"), std::nullopt);
  store.Set("k", "value");
  EXPECT_EQ(store.TryGet("k"), std::optional<std::string>("value"));
}

TEST(MemoryBootstrapStore, AddsFromManyThreadsSumExactly) {
  MemoryBootstrapStore store;
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 1000;
  std::vector<std::thread> adders;
  for (int index = 0; index < kThreads; ++index) {
    adders.emplace_back([&] {
      for (int add = 0; add < kAddsPerThread; ++add) store.Add("count", 1);
    });
  }
  for (std::thread& adder : adders) adder.join();
  EXPECT_EQ(store.Add("count", 0), kThreads * kAddsPerThread);
  EXPECT_EQ(store.Get("count", milliseconds(0)), std::to_string(kThreads * kAddsPerThread));
}

TEST(MemoryBootstrapStore, AddOnAValueThatIsNotAnIntegerIsRefusedNamingKeyAndValue) {
  MemoryBootstrapStore store;
  store.Set("k", "12abc");
  const Error error = ErrorOf([&] { store.Add("k", 1); });
  EXPECT_EQ(error.code(), infiniCclInvalidUsage);
  EXPECT_NE(std::string(error.what()).find("key 'k' whose value '12abc' is not an integer"),
            std::string::npos)
      << error.what();
  EXPECT_EQ(store.TryGet("k"), std::optional<std::string>("12abc"));  // left as it was
}

}  // namespace
