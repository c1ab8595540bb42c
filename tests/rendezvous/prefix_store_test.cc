#include "infini/rendezvous/prefix_store.h"

#include <gtest/gtest.h>

#include <future>

#include "store_test_util.h"

namespace infini::rendezvous {
namespace {

using std::chrono::milliseconds;
using testing::ConnectTo;
using testing::StartLocalServer;

TEST(PrefixStoreTest, KeysLiveUnderThePrefixInTheInnerStore) {
  auto server = StartLocalServer();
  std::shared_ptr<TcpStoreClient> inner = ConnectTo(*server);
  PrefixStore run("job42", inner);
  run.Set("addr", "10.0.0.1");
  EXPECT_EQ(inner->Get("job42/addr"), "10.0.0.1");
  EXPECT_EQ(run.Get("addr"), "10.0.0.1");
  EXPECT_FALSE(inner->Check({"addr"}));
}

TEST(PrefixStoreTest, TwoPrefixesNeverSeeEachOthersKeys) {
  auto server = StartLocalServer();
  std::shared_ptr<TcpStoreClient> inner = ConnectTo(*server);
  PrefixStore first("run1", inner);
  PrefixStore second("run2", inner);
  first.Set("id", "one");
  EXPECT_FALSE(second.Check({"id"}));
  EXPECT_EQ(first.Add("count", 2), 2);
  EXPECT_EQ(second.Add("count", 5), 5);
  EXPECT_EQ(second.CompareSet("id", "", "two"), "two");
  EXPECT_EQ(first.Get("id"), "one");
  EXPECT_TRUE(second.DeleteKey("id"));
  EXPECT_TRUE(first.Check({"id", "count"}));
}

TEST(PrefixStoreTest, PrefixesNest) {
  auto server = StartLocalServer();
  std::shared_ptr<TcpStoreClient> inner = ConnectTo(*server);
  auto run = std::make_shared<PrefixStore>("job42", inner);
  PrefixStore group(run->timeout() == inner->timeout() ? "world" : "?", run);
  group.Set("0", "uid");
  EXPECT_EQ(inner->Get("job42/world/0"), "uid");
}

TEST(PrefixStoreTest, WaitAndItsTimeoutUseThePrefixedKeys) {
  auto server = StartLocalServer();
  std::shared_ptr<TcpStoreClient> inner = ConnectTo(*server);
  PrefixStore run("job42", inner);
  auto waited = std::async(std::launch::async, [&] { run.Wait({"a", "b"}, milliseconds(5000)); });
  auto writer = ConnectTo(*server);
  writer->Set("job42/a", "1");
  writer->Set("job42/b", "1");
  waited.get();
  EXPECT_THROW(run.Wait({"c"}, milliseconds(50)), StoreTimeoutError);
}

TEST(PrefixStoreTest, GetHonoursThePrefixStoresOwnTimeout) {
  auto server = StartLocalServer();
  std::shared_ptr<TcpStoreClient> inner = ConnectTo(*server, milliseconds(30000));
  PrefixStore run("job42", inner);
  run.set_timeout(milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(run.Get("missing"), StoreTimeoutError);
  EXPECT_LT(testing::ElapsedSince(start), milliseconds(1500));
}

TEST(PrefixStoreTest, NullInnerStoreIsRefused) {
  EXPECT_THROW(PrefixStore("job", nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace infini::rendezvous
