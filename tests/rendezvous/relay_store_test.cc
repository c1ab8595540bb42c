// A relay store (TcpStoreServerOptions::upstream): what its clients see is
// what a client of the upstream sees, node-local keys never go upstream, a
// key that many clients wait on is watched upstream once, and everything goes
// up on one connection in batches (against a hand-played upstream).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "infini/rendezvous/tcp_store.h"
#include "request_codec.h"
#include "store_test_util.h"
#include "wire_protocol.h"

namespace infini::rendezvous {
namespace {

using std::chrono::milliseconds;
using testing::ConnectTo;
using testing::ElapsedSince;
using testing::Eventually;
using testing::StartLocalServer;
using testing::StartRelayOf;

TEST(RelayStoreTest, EveryOperationOnUpstreamKeysMeansWhatItMeansUpstream) {
  auto upstream = StartLocalServer();
  auto relay = StartRelayOf(upstream->port());
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
  auto relay = StartRelayOf(upstream->port());
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
  auto relay = StartRelayOf(upstream->port());
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
  EXPECT_EQ(relay->relay_counts().connections, 1u);
}

// A rank that waits in short slices (as a plugin's bootstrap does, to check
// for an abort between them) makes a watch a slice (and one more when a watch
// ends while the next slice waits), each lasting its slice: none is left
// upstream once the slices stop (before, every watch lasted 30 s whatever its
// waiter's timeout).
TEST(RelayStoreTest, WaitsInShortSlicesLeaveNoWatchBehind) {
  auto upstream = StartLocalServer();
  auto relay = StartRelayOf(upstream->port());
  auto rank = ConnectTo(*relay);
  for (int slice = 0; slice < 5; ++slice) {
    EXPECT_THROW(rank->Wait({"run/slow"}, milliseconds(20)), StoreTimeoutError);
  }
  EXPECT_LE(relay->relay_counts().watches, 10u);
  EXPECT_TRUE(Eventually([&] { return upstream->num_waiters() == 0; }, milliseconds(1000)));
  ConnectTo(*upstream)->Set("run/slow", "there");
  EXPECT_EQ(rank->Get("run/slow"), "there");
}

// Waits with a 1 ms timeout on 65,536 distinct absent keys through a relay
// leave no upstream waiters behind them (before: 65,536 watches of 30 s each,
// and more of them fill node 0's waiter budget), and a wait of another
// client is answered meanwhile. Under a sanitizer 8,192 keys: a watch left
// behind still shows, and the 64 threads still race.
TEST(RelayStoreTest, ShortWaitsOnManyAbsentKeysLeaveNoUpstreamWaiters) {
  auto upstream = StartLocalServer();
  auto relay = StartRelayOf(upstream->port());
#ifdef INFINI_STORE_TEST_SANITIZED
  constexpr int kKeys = 8192;
#else
  constexpr int kKeys = 65536;
#endif
  constexpr int kThreads = 64;
  constexpr int kWaitsPerThread = kKeys / kThreads;
  std::atomic<int> timed_out{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto rank = ConnectTo(*relay);
      for (int i = 0; i < kWaitsPerThread; ++i) {
        try {
          rank->Wait({"run/absent/" + std::to_string(t) + "/" + std::to_string(i)},
                     milliseconds(1));
        } catch (const StoreTimeoutError&) {
          ++timed_out;
        }
      }
    });
  }
  auto other = ConnectTo(*relay);
  ConnectTo(*upstream)->Set("run/present", "yes");
  other->Wait({"run/present"}, milliseconds(5000));
  EXPECT_EQ(other->Get("run/present"), "yes");
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(timed_out.load(), kKeys);
  // Each watch lasted its waiter's millisecond (and a round trip).
  EXPECT_TRUE(Eventually([&] { return upstream->num_waiters() == 0; }, milliseconds(1000)))
      << upstream->num_waiters() << " upstream waiters are left";
  other->Wait({"run/present"}, milliseconds(1000));
}

// The watch's bound is an option (RelayUpstream::longest_watch): a waiter
// longer than it is watched in watches of at most that long, one at a time,
// and still gets the key; a bound of 0 is refused by name.
TEST(RelayStoreTest, TheLongestWatchIsAnOption) {
  auto upstream = StartLocalServer();
  TcpStoreServerOptions options;
  options.upstream = RelayUpstream{.host = "127.0.0.1",
                                   .port = upstream->port(),
                                   .token = "",
                                   .connect_timeout = std::chrono::seconds(2),
                                   .longest_watch = milliseconds(50)};
  auto relay = TcpStoreServer::Start(options);
  std::thread waiter([&] { EXPECT_EQ(ConnectTo(*relay)->Get("run/late"), "here"); });
  EXPECT_TRUE(Eventually([&] { return relay->relay_counts().watches >= 3; }));
  EXPECT_LE(upstream->num_waiters(), 1u);
  ConnectTo(*upstream)->Set("run/late", "here");
  waiter.join();

  options.upstream->longest_watch = milliseconds(0);
  try {
    TcpStoreServer::Start(options);
    ADD_FAILURE() << "a longest_watch of 0 was taken";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("upstream.longest_watch"), std::string::npos)
        << error.what();
  }
  TcpStoreServerOptions unsent;
  unsent.max_unsent_bytes_per_connection = 0;
  EXPECT_THROW(TcpStoreServer::Start(unsent), std::invalid_argument);
}

// A 0 ms Get or Wait (a plugin's try_get) asks the upstream once and answers
// what it says, as a direct one does (before: kTimeout for a key that exists
// upstream).
TEST(RelayStoreTest, ZeroMillisecondGetAndWaitAnswerWhatTheUpstreamHolds) {
  auto upstream = StartLocalServer();
  auto relay = StartRelayOf(upstream->port());
  auto rank = ConnectTo(*relay);
  ConnectTo(*upstream)->Set("run/there", "value");
  rank->set_timeout(milliseconds(0));
  EXPECT_EQ(rank->Get("run/there"), "value");
  EXPECT_THROW(rank->Get("run/absent"), StoreTimeoutError);
  rank->Wait({"run/there"}, milliseconds(0));
  EXPECT_THROW(rank->Wait({"run/there", "run/absent"}, milliseconds(0)), StoreTimeoutError);
  // A node-local key is the relay's own: missing, the wait times out there.
  EXPECT_THROW(rank->Wait({"run/there", "run/node-local/x"}, milliseconds(0)), StoreTimeoutError);
  rank->set_timeout(milliseconds(5000));
  rank->Set("run/node-local/x", "");
  rank->Wait({"run/there", "run/node-local/x"}, milliseconds(0));
  EXPECT_EQ(relay->num_waiters(), 0u);
  EXPECT_EQ(upstream->num_waiters(), 0u);
}

TEST(RelayStoreTest, TimeoutsAndUpstreamLossReachTheClient) {
  auto upstream = StartLocalServer();
  auto relay = StartRelayOf(upstream->port());
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

// An upstream that was reached and then went is not waited for as one that
// has not started yet: the next request fails after one try, not after the
// connect timeout (a launcher's heartbeat through its relay learns of node
// 0's loss as its own connection would have).
TEST(RelayStoreTest, AnUpstreamLostAfterItWasReachedFailsTheNextRequestSoon) {
  auto upstream = StartLocalServer();
  auto relay = StartRelayOf(upstream->port(), milliseconds(60000));
  auto rank = ConnectTo(*relay);
  rank->set_timeout(milliseconds(60000));
  rank->Set("run/before", "");
  upstream.reset();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(rank->Set("run/lost", ""), StoreError);
  EXPECT_LT(ElapsedSince(start), milliseconds(20000)) << "waited as for a first connection";
}

// A hand-played run's store, for the relay to batch against: it accepts the
// relay's connection, greets it (version 4, no token) and reads its batches,
// and the test decides when each is answered.
class HandPlayedUpstream {
 public:
  HandPlayedUpstream() : listener_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&address), length), 0);
    EXPECT_EQ(::listen(listener_, 4), 0);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~HandPlayedUpstream() {
    for (const int connection : connections_) ::close(connection);
    ::close(listener_);
  }
  uint16_t port() const { return port_; }

  // Accepts the relay's next connection (one per lane: small requests and
  // large ones) and greets it; reads and answers go to it until Use().
  bool AcceptAndGreet() {
    pollfd listening{.fd = listener_, .events = POLLIN, .revents = 0};
    if (::poll(&listening, 1, 5000) != 1) return false;
    connection_ = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    connections_.push_back(connection_);
    if (ReadFrame().empty()) return false;  // the hello
    return Send(wire::FrameWriter(wire::MessageType::kHelloOk)
                    .U32(wire::kMagic)
                    .U32(wire::kVersion)
                    .U64(1 << 20)
                    .U32(1024)
                    .Finish());
  }

  // Reads and answers on the `index`-th connection accepted, from 0.
  void Use(size_t index) { connection_ = connections_.at(index); }

  // The next batch the relay sent (empty when none came within 5 s).
  std::vector<wire::TaggedRequest> ReadBatch() {
    std::vector<wire::TaggedRequest> requests;
    const std::string body = ReadFrame();
    if (!body.empty()) {
      EXPECT_EQ(wire::DecodeBatch(body, {.max_keys_per_request = 1024}, &requests), "");
    }
    return requests;
  }

  // Answers `tag` with kOk, or with `value` when one is given, telling
  // `batches_done` batches handled.
  bool Answer(uint64_t tag, uint32_t batches_done, const std::string* value = nullptr) {
    wire::Reply reply;
    reply.type = value ? wire::MessageType::kValue : wire::MessageType::kOk;
    if (value) reply.value = std::make_shared<const std::string>(*value);
    wire::BatchReplyWriter writer;
    writer.Add(tag, reply);
    return Send(writer.FinishCopied(batches_done));
  }
  // Tells one batch handled, answering nothing (its requests wait).
  bool Acknowledge() { return Send(wire::BatchReplyWriter().FinishCopied(1)); }

  // Whether the listener has a connection waiting (a second one from the relay).
  bool AnotherConnectionWaits() {
    pollfd listening{.fd = listener_, .events = POLLIN, .revents = 0};
    return ::poll(&listening, 1, 0) == 1;
  }

 private:
  bool Send(const std::string& bytes) {
    return ::send(connection_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  std::string ReadExactly(size_t count) {
    std::string bytes;
    while (bytes.size() < count) {
      pollfd readable{.fd = connection_, .events = POLLIN, .revents = 0};
      if (::poll(&readable, 1, 5000) != 1) return "";
      char buffer[4096];
      const ssize_t got =
          ::recv(connection_, buffer, std::min(sizeof(buffer), count - bytes.size()), 0);
      if (got <= 0) return "";
      bytes.append(buffer, static_cast<size_t>(got));
    }
    return bytes;
  }
  std::string ReadFrame() {
    const std::string header = ReadExactly(wire::kFrameHeaderBytes);
    if (header.empty()) return "";
    return ReadExactly(wire::DecodeU32(header.data()));
  }

  int listener_;
  int connection_ = -1;
  std::vector<int> connections_;
  uint16_t port_ = 0;
};

// Nagle's rule without a timer: the first request leaves at once; what comes
// while its batch is in flight leaves as one frame when the upstream says it
// handled it; a watch still waiting upstream then holds nothing up; all on
// one connection.
TEST(RelayStoreTest, WhatArrivesWhileABatchIsInFlightLeavesAsOneBatchOnTheOneConnection) {
  HandPlayedUpstream upstream;
  auto relay = StartRelayOf(upstream.port());
  std::thread first([&] { ConnectTo(*relay)->Set("run/first", "1"); });
  ASSERT_TRUE(upstream.AcceptAndGreet());
  std::vector<wire::TaggedRequest> batch = upstream.ReadBatch();
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].request.keys, std::vector<std::string>{"run/first"});

  constexpr int kBehind = 3;
  std::vector<std::thread> behind;
  for (int i = 0; i < kBehind; ++i) {
    behind.emplace_back([&, i] { ConnectTo(*relay)->Set("run/behind/" + std::to_string(i), ""); });
  }
  ASSERT_TRUE(Eventually([&] { return relay->relay_counts().queued == kBehind; }));
  ASSERT_TRUE(upstream.Answer(batch[0].tag, 1));
  first.join();
  batch = upstream.ReadBatch();
  ASSERT_EQ(batch.size(), static_cast<size_t>(kBehind)) << "one frame for what queued";
  for (size_t i = 0; i < batch.size(); ++i)
    ASSERT_TRUE(upstream.Answer(batch[i].tag, i == 0 ? 1 : 0));
  for (std::thread& thread : behind) thread.join();

  // A rank waiting on a key: a write behind its watch waits for the watch's
  // batch to be handled, then leaves and is answered while the watch waits.
  std::thread waiter([&] { EXPECT_EQ(ConnectTo(*relay)->Get("run/id"), "the id"); });
  const std::vector<wire::TaggedRequest> watch = upstream.ReadBatch();
  ASSERT_EQ(watch.size(), 1u);
  EXPECT_EQ(watch[0].request.type, wire::MessageType::kGet);
  std::thread writer([&] { ConnectTo(*relay)->Set("run/after", ""); });
  ASSERT_TRUE(Eventually([&] { return relay->relay_counts().queued == 1; }));
  ASSERT_TRUE(upstream.Acknowledge());
  batch = upstream.ReadBatch();
  ASSERT_EQ(batch.size(), 1u);
  ASSERT_TRUE(upstream.Answer(batch[0].tag, 1));
  writer.join();
  const std::string id = "the id";
  ASSERT_TRUE(upstream.Answer(watch[0].tag, 0, &id));
  waiter.join();

  const RelayCounts counts = relay->relay_counts();
  EXPECT_EQ(counts.connections, 1u);
  EXPECT_FALSE(upstream.AnotherConnectionWaits());
  EXPECT_EQ(counts.requests, 6u);
  EXPECT_EQ(counts.messages, 4u);
  EXPECT_EQ(counts.watches, 1u);
}

// No head-of-line blocking: a small request (a rank's Get, a counter) goes
// on the relay's small lane, its own connection, so it is answered while a
// large value is in flight and others are queued, unanswered (before: the
// frame after the one in flight, behind its bytes and the upstream's
// handling of it, 2.2 s on a 1 Gb/s link with 30 ranks' 60 MiB values).
TEST(RelayStoreTest, ASmallRequestNeverWaitsForLargeOnesInFlightOrQueued) {
  HandPlayedUpstream upstream;  // takes frames of at most 1 MiB
  auto relay = StartRelayOf(upstream.port());
  const std::string large(size_t{700} << 10, 'v');
  std::vector<std::thread> ranks;
  ranks.emplace_back([&] { ConnectTo(*relay)->Set("run/large/0", large); });
  ASSERT_TRUE(upstream.AcceptAndGreet());  // connection 0: the large lane
  std::vector<wire::TaggedRequest> in_flight = upstream.ReadBatch();
  ASSERT_EQ(in_flight.size(), 1u);
  for (int i = 1; i <= 3; ++i) {
    ranks.emplace_back([&, i] { ConnectTo(*relay)->Set("run/large/" + std::to_string(i), large); });
  }
  ASSERT_TRUE(Eventually([&] { return relay->relay_counts().queued == 3; }));
  std::thread small([&] { ConnectTo(*relay)->Set("run/heartbeat", "1"); });
  ASSERT_TRUE(upstream.AcceptAndGreet());  // connection 1: the small lane
  std::vector<wire::TaggedRequest> batch = upstream.ReadBatch();
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].request.keys, std::vector<std::string>{"run/heartbeat"});
  ASSERT_TRUE(upstream.Answer(batch[0].tag, 1));
  small.join();  // answered while every large value waits
  EXPECT_EQ(relay->relay_counts().queued, 3u);
  upstream.Use(0);
  batch = in_flight;
  for (int answered = 0;;) {
    ASSERT_FALSE(batch.empty());
    for (size_t i = 0; i < batch.size(); ++i, ++answered) {
      ASSERT_TRUE(upstream.Answer(batch[i].tag, i == 0 ? 1 : 0));
    }
    if (answered == 4) break;
    batch = upstream.ReadBatch();
  }
  for (std::thread& rank : ranks) rank.join();
  EXPECT_EQ(relay->relay_counts().connections, 2u);
}

// A request that waits in the relay to go upstream stays charged to the
// relay's budget, but it arrived whole: it is not refused as a stalled one
// however long it waits (here past a 100 ms stalled_request_timeout behind a
// batch that the upstream does not answer yet).
TEST(RelayStoreTest, ARequestWaitingToGoUpstreamIsNotTakenForAStalledOne) {
  HandPlayedUpstream upstream;
  TcpStoreServerOptions options;
  options.stalled_request_timeout = milliseconds(100);
  options.upstream = RelayUpstream{.host = "127.0.0.1",
                                   .port = upstream.port(),
                                   .token = "",
                                   .connect_timeout = std::chrono::seconds(2)};
  auto relay = TcpStoreServer::Start(options);
  const std::string large(size_t{700} << 10, 'v');  // admitted: above 4 KiB
  std::thread first([&] { ConnectTo(*relay)->Set("run/first", large); });
  ASSERT_TRUE(upstream.AcceptAndGreet());  // the large lane
  std::vector<wire::TaggedRequest> batch = upstream.ReadBatch();
  ASSERT_EQ(batch.size(), 1u);
  std::thread second([&] { EXPECT_NO_THROW(ConnectTo(*relay)->Set("run/large", large)); });
  ASSERT_TRUE(Eventually([&] { return relay->relay_counts().queued == 1; }));
  // Time passes past the stall timeout (several sweeps); nothing to wait for.
  std::this_thread::sleep_for(milliseconds(400));
  ASSERT_TRUE(upstream.Answer(batch[0].tag, 1));
  first.join();
  batch = upstream.ReadBatch();
  ASSERT_EQ(batch.size(), 1u);
  ASSERT_TRUE(upstream.Answer(batch[0].tag, 1));
  second.join();
}

}  // namespace
}  // namespace infini::rendezvous
