// The RendezvousHandler contract, one test body for every backend: nodes
// join one round and agree on it, a node that disagrees or finds the round
// full is refused in one line and stops the run, and a node that stops is
// reported lost, once, by the watch (on TCP not when it left cleanly: its
// on-close keys are cancelled); an elastic run's rounds close at MAX,
// or after the last call once MIN joined, and a later round takes a late
// node in. The etcd half needs an etcd binary at
// configure time (as tests/etcd/ does) and is skipped, saying so, without.
#include "infini/launch/rendezvous_handler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "infini/rendezvous/store.h"
#include "unused_port.h"
#if INFINI_TEST_WITH_ETCD
#include "etcd_cluster.h"
#endif

namespace infini::launch {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// Node 0's TCP store at a port nobody listens on yet.
struct TcpBackend {
  static constexpr bool kAvailable = true;
  static constexpr const char* kMissing = "";
  uint16_t port = infini::testing::UnusedPortBelowEphemeralRange();
  void Configure(LaunchOptions* options) const {
    options->rendezvous_host = "127.0.0.1";
    options->rendezvous_port = port;
  }
};

// A one-member etcd cluster of this test's own.
struct EtcdBackend {
#if INFINI_TEST_WITH_ETCD
  static constexpr bool kAvailable = true;
  etcd_testing::EtcdCluster cluster{1};
  void Configure(LaunchOptions* options) const {
    options->rendezvous_on_etcd = true;
    options->etcd_endpoints = cluster.endpoint_list();
  }
#else
  static constexpr bool kAvailable = false;
  void Configure(LaunchOptions*) const {}
#endif
  static constexpr const char* kMissing =
      "etcd half skipped: no etcd in PATH when configured (apt-get install etcd-server and "
      "configure again)";
};

// A node of the test: its handler and what joining gave it, or the error.
struct Node {
  std::shared_ptr<RendezvousHandler> handler;
  std::optional<RendezvousWorld> world;
  std::string error;
};

template <typename Backend>
class RendezvousHandlerContract : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Backend::kAvailable) GTEST_SKIP() << Backend::kMissing;
    backend_ = std::make_unique<Backend>();
  }

  void TearDown() override {
    for (Node* node : {&first_, &second_, &third_}) {
      if (node->handler) node->handler->Shutdown([](milliseconds) {});
    }
  }

  LaunchOptions Options(int processes_per_node = 2) const {
    LaunchOptions options;
    options.nnodes = 2;
    options.processes_per_node = processes_per_node;
    options.run_id = "contract";
    options.run_token = "contract-secret";
    options.rendezvous_timeout = seconds(20);
    options.heartbeat_timeout = seconds(1);
    options.monitor_interval = milliseconds(20);
    backend_->Configure(&options);
    return options;
  }

  static void Join(Node* node, const LaunchOptions& options) {
    node->handler = MakeRendezvousHandler(options);
    try {
      node->world = JoinRound(*node->handler, options);
    } catch (const LaunchError& error) {
      node->error = error.what();
    }
  }

  // Both nodes at once, in join order (rank unset, as --node_rank is).
  void JoinBoth() {
    std::thread other([this] { Join(&second_, Options()); });
    Join(&first_, Options());
    other.join();
    ASSERT_TRUE(first_.world) << first_.error;
    ASSERT_TRUE(second_.world) << second_.error;
    if (first_.world->node_rank != 0) std::swap(first_, second_);
  }

  // Who holds each node rank, as the link gives the watch.
  std::vector<std::string> Owners() {
    std::vector<std::string> owners(2);
    for (const RunMember& member : first_.handler->records().Get().members) {
      if (member.slot >= 0 && member.slot < 2)
        owners[static_cast<size_t>(member.slot)] = member.owner;
    }
    return owners;
  }

  std::unique_ptr<Backend> backend_;
  Node first_, second_, third_;
};

using Backends = ::testing::Types<TcpBackend, EtcdBackend>;
class BackendNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, TcpBackend> ? "Tcp" : "Etcd";
  }
};
TYPED_TEST_SUITE(RendezvousHandlerContract, Backends, BackendNames);

TYPED_TEST(RendezvousHandlerContract, TwoNodesJoinOneRoundAndAgreeOnIt) {
  this->JoinBoth();
  const RendezvousWorld& zero = *this->first_.world;
  const RendezvousWorld& one = *this->second_.world;
  EXPECT_EQ(zero.node_rank, 0);
  EXPECT_EQ(one.node_rank, 1);
  for (const RendezvousWorld* world : {&zero, &one}) {
    EXPECT_EQ(world->round, 0);
    EXPECT_EQ(world->nnodes, 2);
  }
  EXPECT_EQ(one.master_addr, zero.master_addr);
  EXPECT_EQ(one.master_port, zero.master_port);
  EXPECT_NE(zero.master_port, 0);
  EXPECT_EQ(one.store_addr, zero.store_addr);
  EXPECT_EQ(one.store_port, zero.store_port);
  EXPECT_NE(zero.store_port, 0);
  EXPECT_TRUE(this->first_.handler->hosts_store()) << "node 0 hosts a store";
  EXPECT_FALSE(this->second_.handler->hosts_store());
}

TYPED_TEST(RendezvousHandlerContract, ANodeThatFindsTheRoundFullIsRefused) {
  this->JoinBoth();
  this->Join(&this->third_, this->Options());
  EXPECT_FALSE(this->third_.world);
  EXPECT_THAT(this->third_.error, HasSubstr("joined as node 3 of --nnodes=2: too many nodes"));
  EXPECT_EQ(this->first_.handler->records().Get().outcome, RunOutcome::kFailed) << "the run stops";
}

TYPED_TEST(RendezvousHandlerContract, ANodeThatDisagreesIsRefusedNamingTheFlag) {
  this->Join(&this->first_, this->Options(2));
  ASSERT_TRUE(this->first_.world) << this->first_.error;
  this->Join(&this->second_, this->Options(3));
  EXPECT_FALSE(this->second_.world);
  EXPECT_THAT(this->second_.error, HasSubstr(" on --nproc_per_node: "));
  EXPECT_THAT(this->second_.error, HasSubstr(" has '2', "));
  EXPECT_THAT(this->second_.error, EndsWith(" has '3'"));
  EXPECT_EQ(this->first_.handler->records().Get().outcome, RunOutcome::kFailed) << "the run stops";
}

TYPED_TEST(RendezvousHandlerContract, TheWatchReportsANodeThatStoppedOnce) {
  this->JoinBoth();
  std::atomic<int> changes{0};
  this->first_.handler->StartWatch([&changes] { ++changes; });
  this->second_.handler->StartWatch([] {});
  const std::vector<std::string> owners = this->Owners();
  this->second_.handler->Watch(owners);
  // Node 1 stops: no more heartbeats, its lease's keep-alive ends.
  this->second_.handler->Shutdown([](milliseconds) {});
  std::vector<LostNode> lost;
  const auto deadline = Clock::now() + seconds(30);
  while (lost.empty() && Clock::now() < deadline) {
    lost = this->first_.handler->Watch(owners).lost;
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_EQ(lost.size(), 1u) << "node 1 not reported lost within 30 s";
  EXPECT_EQ(lost[0].node_rank, 1);
  EXPECT_THAT(lost[0].message, HasSubstr("node 1 lost: its infini_run ("));
  EXPECT_THAT(lost[0].message, HasSubstr("--rdzv_conf=heartbeat_timeout"));
  for (int step = 0; step < 10; ++step) {
    EXPECT_TRUE(this->first_.handler->Watch(owners).lost.empty()) << "reported once";
    std::this_thread::sleep_for(milliseconds(100));
  }
}

// --nnodes=2:3: round 0 closes with two nodes once the last call passed;
// round 1 takes a third that arrived late and closes at MAX at once; every
// member of a round agrees on its size, the node ranks are distinct, and
// node 0 of the TCP store stays its host.
TYPED_TEST(RendezvousHandlerContract, ElasticRoundsCloseAndALaterRoundTakesALateNode) {
  auto elastic = [this] {
    LaunchOptions options = this->Options();
    options.nnodes = 3;
    options.min_nnodes = 2;
    options.last_call_timeout = milliseconds(300);
    return options;
  };
  std::thread other([&] { this->Join(&this->second_, elastic()); });
  const auto started = Clock::now();
  this->Join(&this->first_, elastic());
  other.join();
  ASSERT_TRUE(this->first_.world) << this->first_.error;
  ASSERT_TRUE(this->second_.world) << this->second_.error;
  EXPECT_GE(Clock::now() - started, milliseconds(300)) << "MIN, then the last call";
  for (const Node* node : {&this->first_, &this->second_}) {
    EXPECT_EQ(node->world->round, 0);
    EXPECT_EQ(node->world->nnodes, 2);
  }
  EXPECT_NE(this->first_.world->node_rank, this->second_.world->node_rank);

  // A third arrives: round 1 opens with every node, full at once; the two
  // members, seeing it open, move on to it (as their links would tell them).
  std::thread third([&] { this->Join(&this->third_, elastic()); });
  const auto deadline = Clock::now() + seconds(20);
  while (this->first_.handler->records().Get().round == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  std::optional<RendezvousWorld> next[2];
  std::thread members[2];
  for (int member = 0; member < 2; ++member) {
    Node* node = member == 0 ? &this->first_ : &this->second_;
    members[member] = std::thread([&, node, member] {
      next[member] = JoinThroughRecord(*node->handler, elastic(), [] { return false; });
    });
  }
  for (std::thread& member : members) member.join();
  third.join();
  ASSERT_TRUE(this->third_.world) << this->third_.error;
  std::set<int> ranks;
  for (const RendezvousWorld* world : {&*next[0], &*next[1], &*this->third_.world}) {
    EXPECT_EQ(world->round, 1);
    EXPECT_EQ(world->nnodes, 3);
    EXPECT_EQ(world->master_port, next[0]->master_port);
    ranks.insert(world->node_rank);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  if (this->first_.handler->hosts_store()) {
    EXPECT_EQ(next[0]->node_rank, 0) << "the store's host is node 0 in every round";
  }
}

// TCP: a node that left cleanly cancelled its on-close keys, so its
// connection closing (however slowly its left key was flushed) never reads
// as its launcher's death (issue 34).
class TcpRendezvousHandler : public RendezvousHandlerContract<TcpBackend> {};

TEST_F(TcpRendezvousHandler, ANodeThatLeftCleanlyLeavesNoOnCloseKeyBehind) {
  JoinBoth();
  const std::vector<std::string> owners = Owners();
  second_.handler->StartWatch([] {});
  second_.handler->Watch(owners);  // its first step registers its on-close keys
  second_.handler->LeaveCleanly();
  second_.handler->Watch(owners);  // the link's last step registers nothing again
  // A marker on the same connection: the store sets every on-close key of a
  // connection in one step, so once it shows, any key left shows too.
  second_.handler->store().SetOnClose("test/closed", "1");
  second_.handler->Shutdown([](milliseconds) {});
  second_.handler.reset();  // closes its connection
  rendezvous::Store& zero = first_.handler->store();
  zero.Wait({"test/closed"}, seconds(30));
  EXPECT_FALSE(zero.Check({"infini_run/launcher_gone/1"}));
  EXPECT_FALSE(zero.Check({"infini_run/launcher_gone"}));
  EXPECT_TRUE(first_.handler->Watch(owners).lost.empty()) << "not reported lost";
}

}  // namespace
}  // namespace infini::launch
