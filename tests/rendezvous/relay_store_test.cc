// A relay store (TcpStoreServerOptions::upstream): what its clients see is
// what a client of the upstream sees, node-local keys never go upstream, and
// a key that many clients wait on is watched upstream once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "infini/rendezvous/tcp_store.h"
#include "store_test_util.h"

namespace infini::rendezvous {
namespace {

using std::chrono::milliseconds;
using testing::ConnectTo;
using testing::ElapsedSince;
using testing::Eventually;
using testing::StartLocalServer;

std::unique_ptr<TcpStoreServer> StartRelay(uint16_t upstream_port) {
  TcpStoreServerOptions options;
  options.upstream = RelayUpstream{.host = "127.0.0.1",
                                   .port = upstream_port,
                                   .token = "",
                                   .connect_timeout = milliseconds(2000)};
  return TcpStoreServer::Start(options);
}

TEST(RelayStoreTest, EveryOperationOnUpstreamKeysMeansWhatItMeansUpstream) {
  auto upstream = StartLocalServer();
  auto relay = StartRelay(upstream->port());
  auto rank = ConnectTo(*relay);
  auto other_node = ConnectTo(*upstream);

  rank->Set("run/a", "1");
  EXPECT_EQ(other_node->Get("run/a"), "1");
  EXPECT_EQ(rank->Add("run/count", 2), 2);
  EXPECT_EQ(other_node->Add("run/count", 3), 5);
  EXPECT_EQ(rank->CompareSet("run/a", "1", "2"), "2");
  EXPECT_EQ(rank->CompareSet("run/a", "1", "3"), "2");
  EXPECT_TRUE(rank->Check({"run/a", "run/count"}));
  EXPECT_FALSE(rank->Check({"run/a", "run/missing"}));
  other_node->Set("run/b", "from node 0");
  EXPECT_EQ(rank->Get("run/b"), "from node 0");
  EXPECT_TRUE(rank->DeleteKey("run/b"));
  EXPECT_FALSE(other_node->Check({"run/b"}));
  EXPECT_EQ(rank->NumKeys(), other_node->NumKeys());
  // Nothing is kept: a value changed upstream is read anew.
  other_node->Set("run/a", "4");
  EXPECT_EQ(rank->Get("run/a"), "4");
  EXPECT_EQ(relay->num_keys(), 0u);
}

TEST(RelayStoreTest, NodeLocalKeysNeverGoUpstream) {
  auto upstream = StartLocalServer();
  auto relay = StartRelay(upstream->port());
  auto rank = ConnectTo(*relay);
  auto peer = ConnectTo(*relay);

  rank->Set("run/0/node-local/pg/g.1/unique_id", "id");
  EXPECT_EQ(peer->Get("run/0/node-local/pg/g.1/unique_id"), "id");
  EXPECT_EQ(peer->Add("run/0/node-local/pg/g.1/arrived", 1), 1);
  EXPECT_TRUE(peer->Check({"run/0/node-local/pg/g.1/arrived"}));
  peer->Wait({"run/0/node-local/pg/g.1/unique_id"}, milliseconds(1000));
  EXPECT_EQ(relay->relay_counts().requests, 0u);
  EXPECT_EQ(upstream->num_keys(), 0u);
  // "node-locals" is not the segment.
  rank->Set("run/node-locals", "x");
  EXPECT_EQ(upstream->num_keys(), 1u);
}

TEST(RelayStoreTest, ManyWaitersOnOneKeyMakeOneUpstreamWatch) {
  auto upstream = StartLocalServer();
  auto relay = StartRelay(upstream->port());
  constexpr int kWaiters = 8;
  std::atomic<int> got{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      auto rank = ConnectTo(*relay);
      // Mixed: an upstream key and a node-local one.
      if (i % 2 == 0) {
        if (rank->Get("run/id") == "root's id") ++got;
      } else {
        rank->Wait({"run/id", "run/node-local/ready"}, milliseconds(5000));
        ++got;
      }
    });
  }
  ASSERT_TRUE(Eventually([&] { return relay->num_waiters() == kWaiters; }));
  auto local = ConnectTo(*relay);
  local->Set("run/node-local/ready", "");
  ConnectTo(*upstream)->Set("run/id", "root's id");
  for (std::thread& waiter : waiters) waiter.join();
  EXPECT_EQ(got.load(), kWaiters);
  EXPECT_EQ(relay->relay_counts().watches, 1u);
  EXPECT_LE(relay->relay_counts().connections, 2u);
}

TEST(RelayStoreTest, TimeoutsAndUpstreamLossReachTheClient) {
  auto upstream = StartLocalServer();
  auto relay = StartRelay(upstream->port());
  auto rank = ConnectTo(*relay);
  rank->set_timeout(milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(rank->Get("run/never"), StoreTimeoutError);
  EXPECT_THROW(rank->Wait({"run/never"}, milliseconds(100)), StoreTimeoutError);
  EXPECT_LT(ElapsedSince(start), milliseconds(2000));
  rank->Set("run/after", "the connection still works");

  // A waiter is told when the upstream goes.
  std::thread waiter([&] {
    auto waiting = ConnectTo(*relay);
    EXPECT_THROW(waiting->Get("run/never"), StoreError);
  });
  ASSERT_TRUE(Eventually([&] { return relay->num_waiters() == 1; }));
  upstream.reset();
  waiter.join();
  rank->set_timeout(milliseconds(5000));  // beyond the relay's 2 s of reconnecting
  try {
    rank->Set("run/lost", "");
    ADD_FAILURE() << "a write with the upstream gone succeeded";
  } catch (const StoreTimeoutError&) {
    ADD_FAILURE() << "a lost upstream is an error, not a timeout";
  } catch (const StoreError& error) {
    EXPECT_NE(std::string(error.what()).find("could not reach the run's store"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace infini::rendezvous
