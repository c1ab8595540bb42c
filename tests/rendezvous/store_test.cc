// The store's operations, between real clients and a real server over TCP.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
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

TEST(TcpStoreTest, SetThenGetReturnsTheValue) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  client->Set("key", "value");
  EXPECT_EQ(client->Get("key"), "value");
  client->Set("key", "replaced");
  EXPECT_EQ(client->Get("key"), "replaced");
  EXPECT_EQ(server->num_keys(), 1u);
  EXPECT_EQ(client->NumKeys(), 1);
}

TEST(TcpStoreTest, ValuesKeepEmptyBinaryAndLargeContent) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  const std::string binary("a\0b\xff", 4);
  const std::string large(size_t{1} << 20, 'x');
  client->Set("empty", "");
  client->Set(binary, binary);
  client->Set("large", large);
  EXPECT_EQ(client->Get("empty"), "");
  EXPECT_EQ(client->Get(binary), binary);
  EXPECT_EQ(client->Get("large"), large);
}

TEST(TcpStoreTest, ValueSetByOneClientIsSeenByAnother) {
  auto server = StartLocalServer();
  auto writer = ConnectTo(*server);
  auto reader = ConnectTo(*server);
  writer->Set("address", "10.0.0.1:1234");
  EXPECT_EQ(reader->Get("address"), "10.0.0.1:1234");
}

TEST(TcpStoreTest, GetBlocksUntilAnotherClientSets) {
  auto server = StartLocalServer();
  auto reader = ConnectTo(*server);
  auto writer = ConnectTo(*server);
  auto value = std::async(std::launch::async, [&] { return reader->Get("late"); });
  ASSERT_TRUE(Eventually([&] { return server->num_waiters() == 1; }));
  EXPECT_EQ(value.wait_for(milliseconds(50)), std::future_status::timeout);
  writer->Set("late", "here");
  EXPECT_EQ(value.get(), "here");
  EXPECT_EQ(server->num_waiters(), 0u);
}

TEST(TcpStoreTest, GetTimesOutNamingKeyAndTimeout) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  client->set_timeout(milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  try {
    client->Get("never");
    FAIL() << "Get returned";
  } catch (const StoreTimeoutError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'never'"), std::string::npos) << message;
    EXPECT_NE(message.find("0.2s"), std::string::npos) << message;
    EXPECT_NE(message.find("127.0.0.1:" + std::to_string(server->port())), std::string::npos)
        << message;
  }
  EXPECT_GE(ElapsedSince(start), milliseconds(190));
  EXPECT_LT(ElapsedSince(start), milliseconds(1500));
  // The timed-out request left nothing behind, and the connection still works.
  EXPECT_EQ(server->num_waiters(), 0u);
  client->Set("never", "now");
  EXPECT_EQ(client->Get("never"), "now");
}

TEST(TcpStoreTest, WaitReturnsOnceEveryKeyExists) {
  auto server = StartLocalServer();
  auto waiter = ConnectTo(*server);
  auto writer = ConnectTo(*server);
  writer->Set("a", "1");
  auto done = std::async(std::launch::async, [&] { waiter->Wait({"a", "b", "c", "b"}); });
  ASSERT_TRUE(Eventually([&] { return server->num_waiters() == 1; }));
  writer->Set("b", "2");
  EXPECT_EQ(done.wait_for(milliseconds(50)), std::future_status::timeout);
  writer->Add("c", 1);
  done.get();
  EXPECT_EQ(server->num_waiters(), 0u);
  waiter->Wait({"a", "b", "c"}, milliseconds(0));  // all present: returns at once
  waiter->Wait({});
}

TEST(TcpStoreTest, WaitTimesOutNamingTheKeys) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  client->Set("present", "1");
  const auto start = std::chrono::steady_clock::now();
  try {
    client->Wait({"present", "missing"}, milliseconds(150));
    FAIL() << "Wait returned";
  } catch (const StoreTimeoutError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'missing'"), std::string::npos) << message;
    EXPECT_NE(message.find("0.15s"), std::string::npos) << message;
  }
  EXPECT_GE(ElapsedSince(start), milliseconds(140));
  EXPECT_LT(ElapsedSince(start), milliseconds(1500));
  EXPECT_EQ(server->num_waiters(), 0u);
  EXPECT_TRUE(client->Check({"present"}));
}

TEST(TcpStoreTest, AddCountsFromZeroAndIsReadableAsText) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  EXPECT_EQ(client->Add("counter", 5), 5);
  EXPECT_EQ(client->Add("counter", -7), -2);
  EXPECT_EQ(client->Get("counter"), "-2");
  client->Set("counter", "40");
  EXPECT_EQ(client->Add("counter", 2), 42);
}

TEST(TcpStoreTest, AddToANonIntegerIsRefusedAndTheConnectionStaysUsable) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  client->Set("text", "abc");
  try {
    client->Add("text", 1);
    FAIL() << "Add succeeded";
  } catch (const StoreError& error) {
    EXPECT_NE(std::string(error.what()).find("not an integer"), std::string::npos) << error.what();
  }
  client->Set("counter", "9223372036854775807");
  EXPECT_THROW(client->Add("counter", 1), StoreError);  // overflow
  EXPECT_EQ(client->Get("text"), "abc");
}

TEST(TcpStoreTest, ConcurrentAddsFromManyClientsSumExactly) {
  auto server = StartLocalServer();
  constexpr int kClients = 16;
  constexpr int kAddsPerClient = 200;
  std::vector<std::thread> threads;
  for (int client_index = 0; client_index < kClients; ++client_index) {
    threads.emplace_back([&] {
      auto client = ConnectTo(*server);
      for (int i = 0; i < kAddsPerClient; ++i) client->Add("total", 1);
    });
  }
  for (std::thread& thread : threads) thread.join();
  auto client = ConnectTo(*server);
  EXPECT_EQ(client->Get("total"), std::to_string(kClients * kAddsPerClient));
}

TEST(TcpStoreTest, OneClientIsSafeToShareBetweenThreads) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  std::vector<std::thread> threads;
  for (int thread_index = 0; thread_index < 8; ++thread_index) {
    threads.emplace_back([&, thread_index] {
      for (int i = 0; i < 100; ++i) {
        client->Add("shared", 1);
        client->Set("thread" + std::to_string(thread_index), std::to_string(i));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(client->Get("shared"), "800");
  EXPECT_EQ(client->Get("thread3"), "99");
}

TEST(TcpStoreTest, EveryWaiterOnOneKeyWakesWhenItIsSet) {
  auto server = StartLocalServer();
  constexpr int kWaiters = 64;
  std::vector<std::unique_ptr<TcpStoreClient>> clients;
  for (int i = 0; i < kWaiters; ++i) clients.push_back(ConnectTo(*server));
  std::atomic<int> woken{0};
  std::vector<std::thread> threads;
  for (auto& client : clients) {
    threads.emplace_back([&client, &woken] {
      client->Wait({"go"});
      if (client->Get("go") == "now") woken.fetch_add(1);
    });
  }
  ASSERT_TRUE(Eventually([&] { return server->num_waiters() == kWaiters; }));
  ConnectTo(*server)->Set("go", "now");
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(woken.load(), kWaiters);
  EXPECT_EQ(server->num_waiters(), 0u);
}

TEST(TcpStoreTest, CompareSetOnAMissingKeyWithEmptyExpectedSetsIt) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  EXPECT_EQ(client->CompareSet("leader", "", "rank0"), "rank0");
  EXPECT_EQ(client->Get("leader"), "rank0");
}

TEST(TcpStoreTest, CompareSetOnAMissingKeyWithOtherExpectedLeavesItMissing) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  EXPECT_EQ(client->CompareSet("leader", "rank9", "rank0"), "rank9");
  EXPECT_FALSE(client->Check({"leader"}));
}

TEST(TcpStoreTest, CompareSetReplacesOnlyAMatchingValue) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  client->Set("epoch", "1");
  EXPECT_EQ(client->CompareSet("epoch", "0", "2"), "1");  // stale expectation: unchanged
  EXPECT_EQ(client->Get("epoch"), "1");
  EXPECT_EQ(client->CompareSet("epoch", "1", "2"), "2");
  EXPECT_EQ(client->Get("epoch"), "2");
}

TEST(TcpStoreTest, OnlyOneOfManyRacingCompareSetsWins) {
  auto server = StartLocalServer();
  constexpr int kContenders = 8;
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kContenders; ++i) {
    threads.emplace_back([&, i] {
      auto client = ConnectTo(*server);
      const std::string me = "rank" + std::to_string(i);
      if (client->CompareSet("leader", "", me) == me) winners.fetch_add(1);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(winners.load(), 1);
}

TEST(TcpStoreTest, CompareSetWakesWaiters) {
  auto server = StartLocalServer();
  auto waiter = ConnectTo(*server);
  auto writer = ConnectTo(*server);
  auto value = std::async(std::launch::async, [&] { return waiter->Get("leader"); });
  ASSERT_TRUE(Eventually([&] { return server->num_waiters() == 1; }));
  writer->CompareSet("leader", "", "rank3");
  EXPECT_EQ(value.get(), "rank3");
}

TEST(TcpStoreTest, DeleteKeyReportsWhetherTheKeyExisted) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  client->Set("doomed", "x");
  EXPECT_TRUE(client->DeleteKey("doomed"));
  EXPECT_FALSE(client->DeleteKey("doomed"));
  EXPECT_FALSE(client->Check({"doomed"}));
  EXPECT_EQ(server->num_keys(), 0u);
}

TEST(TcpStoreTest, CheckTellsWhetherAllKeysExistWithoutWaiting) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server);
  client->Set("a", "1");
  client->Set("b", "2");
  EXPECT_TRUE(client->Check({"a"}));
  EXPECT_TRUE(client->Check({"a", "b"}));
  EXPECT_FALSE(client->Check({"a", "c"}));
  EXPECT_TRUE(client->Check({}));
  EXPECT_EQ(server->num_waiters(), 0u);
}

TEST(TcpStoreTest, ServerOnPortZeroPicksAFreePort) {
  auto first = StartLocalServer();
  auto second = StartLocalServer();
  EXPECT_NE(first->port(), 0);
  EXPECT_NE(first->port(), second->port());
}

TEST(TcpStoreTest, ServerAndClientWorkOverIpv6) {
  TcpStoreServerOptions options;
  options.host = "::1";
  std::unique_ptr<TcpStoreServer> server;
  try {
    server = TcpStoreServer::Start(options);
  } catch (const StoreError& error) {
    GTEST_SKIP() << "no IPv6 loopback here: " << error.what();
  }
  auto client = TcpStoreClient::Connect("::1", server->port(), milliseconds(2000));
  client->Set("v6", "yes");
  EXPECT_EQ(client->Get("v6"), "yes");
}

TEST(TcpStoreTest, ClientResolvesHostNames) {
  auto server = StartLocalServer();
  auto client = TcpStoreClient::Connect("localhost", server->port(), milliseconds(2000));
  client->Set("k", "v");
  EXPECT_EQ(client->Get("k"), "v");
}

}  // namespace
}  // namespace infini::rendezvous
