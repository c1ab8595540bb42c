// The RunRecordStore contract, one test body for each home of the run
// record: in process, node 0's TCP store, and etcd (where an etcd binary was
// found at configure time, as tests/etcd/ does; skipped, saying so,
// without). Each "launcher" of a test opens its own handle (its own
// connection), as launchers of different hosts would.
#include "infini/launch/run_record_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "infini/rendezvous/etcd_store.h"
#include "infini/rendezvous/tcp_store.h"
#if INFINI_TEST_WITH_ETCD
#include "etcd_cluster.h"
#endif

namespace infini::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

struct LocalHome {
  static constexpr bool kAvailable = true;
  static constexpr const char* kMissing = "";
  std::shared_ptr<RunRecordStore> store = MakeLocalRunRecordStore();
  std::shared_ptr<RunRecordStore> Open() { return store; }
};

struct TcpHome {
  static constexpr bool kAvailable = true;
  static constexpr const char* kMissing = "";
  std::unique_ptr<rendezvous::TcpStoreServer> server = rendezvous::TcpStoreServer::Start();
  std::vector<std::shared_ptr<rendezvous::Store>> clients;
  std::shared_ptr<RunRecordStore> Open() {
    std::shared_ptr<rendezvous::Store> client =
        rendezvous::TcpStoreClient::Connect("127.0.0.1", server->port(), seconds(10));
    clients.push_back(client);
    return std::shared_ptr<RunRecordStore>(MakeKeyRunRecordStore(*client));
  }
  ~TcpHome() = default;
};

struct EtcdHome {
#if INFINI_TEST_WITH_ETCD
  static constexpr bool kAvailable = true;
  etcd_testing::EtcdCluster cluster{1};
  std::shared_ptr<RunRecordStore> Open() {
    rendezvous::EtcdStoreOptions options;
    options.endpoints = cluster.endpoint_list();
    options.key_prefix = "run_record_test/";
    return std::shared_ptr<RunRecordStore>(MakeEtcdRunRecordStore(options));
  }
#else
  static constexpr bool kAvailable = false;
  std::shared_ptr<RunRecordStore> Open() { return nullptr; }
#endif
  static constexpr const char* kMissing =
      "etcd half skipped: no etcd in PATH when configured (apt-get install etcd-server and "
      "configure again)";
};

template <typename Home>
class RunRecordStoreContract : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Home::kAvailable) GTEST_SKIP() << Home::kMissing;
    home_ = std::make_unique<Home>();
  }
  // Handles go before the home (their connections before its server).
  void TearDown() override { handles_.clear(); }

  RunRecordStore& Open() {
    handles_.push_back(home_->Open());
    return *handles_.back();
  }

  std::unique_ptr<Home> home_;
  std::vector<std::shared_ptr<RunRecordStore>> handles_;
};

using Homes = ::testing::Types<LocalHome, TcpHome, EtcdHome>;
class HomeNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, LocalHome>) return "Local";
    return std::is_same_v<T, TcpHome> ? "Tcp" : "Etcd";
  }
};
TYPED_TEST_SUITE(RunRecordStoreContract, Homes, HomeNames);

RunRecord WithAttempt(int attempt) {
  RunRecord record;
  record.attempt = attempt;
  record.message = "attempt " + std::to_string(attempt);
  return record;
}

TYPED_TEST(RunRecordStoreContract, NothingStoredReadsAsVersionZero) {
  EXPECT_EQ(this->Open().Get(), RunRecord{});
}

TYPED_TEST(RunRecordStoreContract, AWriteIsTheNextVersionAndEveryLauncherReadsItWhole) {
  RunRecordStore& writer = this->Open();
  RunRecordStore& reader = this->Open();
  const RecordWrite first = writer.CompareAndSet(0, WithAttempt(3));
  ASSERT_TRUE(first.stored);
  EXPECT_EQ(first.record.version, 1);
  EXPECT_EQ(first.record.message, "attempt 3");
  EXPECT_EQ(reader.Get(), first.record);
  const RecordWrite second = reader.CompareAndSet(1, WithAttempt(4));
  ASSERT_TRUE(second.stored);
  EXPECT_EQ(second.record.version, 2);
  EXPECT_EQ(writer.Get(), second.record);
}

TYPED_TEST(RunRecordStoreContract, AStaleVersionIsRefusedWithTheRecordStoredFirst) {
  RunRecordStore& first = this->Open();
  RunRecordStore& second = this->Open();
  ASSERT_TRUE(first.CompareAndSet(0, WithAttempt(1)).stored);
  const RecordWrite late_create = second.CompareAndSet(0, WithAttempt(9));
  EXPECT_FALSE(late_create.stored);
  EXPECT_EQ(late_create.record.message, "attempt 1");
  ASSERT_TRUE(second.CompareAndSet(1, WithAttempt(2)).stored);
  // `first` last saw version 1: its write on it loses to version 2.
  const RecordWrite stale = first.CompareAndSet(1, WithAttempt(8));
  EXPECT_FALSE(stale.stored);
  EXPECT_EQ(stale.record.version, 2);
  EXPECT_EQ(stale.record.message, "attempt 2");
  EXPECT_EQ(second.Get().message, "attempt 2");
}

TYPED_TEST(RunRecordStoreContract, ConcurrentUpdatesEachLandExactlyOnce) {
  constexpr int kLaunchers = 4;
  constexpr int kUpdatesEach = 10;
  std::vector<RunRecordStore*> stores;
  for (int i = 0; i < kLaunchers; ++i) stores.push_back(&this->Open());
  std::vector<std::thread> launchers;
  for (RunRecordStore* store : stores) {
    launchers.emplace_back([store] {
      for (int i = 0; i < kUpdatesEach; ++i) {
        UpdateRunRecord(*store, [](const RunRecord& record) {
          RecordStep step{record, {}};
          ++step.record.attempt;
          return step;
        });
      }
    });
  }
  for (std::thread& launcher : launchers) launcher.join();
  const RunRecord last = stores[0]->Get();
  EXPECT_EQ(last.attempt, kLaunchers * kUpdatesEach);
  EXPECT_EQ(last.version, kLaunchers * kUpdatesEach);
}

TYPED_TEST(RunRecordStoreContract, AWatchWakesOnTheNextVersionAndReturnsAtItsDeadline) {
  RunRecordStore& watcher = this->Open();
  RunRecordStore& writer = this->Open();
  ASSERT_TRUE(writer.CompareAndSet(0, WithAttempt(1)).stored);
  // Already past: at once.
  EXPECT_EQ(watcher.Watch(0, Clock::now() + seconds(30)).version, 1);
  // Nothing newer: the record as it is, at the deadline.
  const auto before = Clock::now();
  EXPECT_EQ(watcher.Watch(1, before + milliseconds(300)).version, 1);
  EXPECT_GE(Clock::now() - before, milliseconds(300));
  // A write wakes the watch long before its deadline.
  std::atomic<bool> watching{false};
  RunRecord seen;
  std::thread watch([&] {
    watching = true;
    seen = watcher.Watch(1, Clock::now() + seconds(60));
  });
  while (!watching) std::this_thread::yield();
  const auto written = Clock::now();
  ASSERT_TRUE(writer.CompareAndSet(1, WithAttempt(2)).stored);
  watch.join();
  EXPECT_LT(Clock::now() - written, seconds(10));
  EXPECT_EQ(seen.version, 2);
  EXPECT_EQ(seen.message, "attempt 2");
}

TYPED_TEST(RunRecordStoreContract, TwoLaunchersJoinOneRoundThroughTheRecord) {
  RunRules rules;
  rules.min_nodes = rules.max_nodes = 2;
  const WallTime now{milliseconds(1'700'000'000'000)};
  RunRecordStore& first = this->Open();
  RunRecordStore& second = this->Open();
  std::thread other([&] {
    UpdateRunRecord(second, [&](const RunRecord& record) {
      RunMember me;
      me.owner = "b:2";
      return record::Join(record, rules, me, now);
    });
  });
  UpdateRunRecord(first, [&](const RunRecord& record) {
    RunMember me;
    me.owner = "a:1";
    me.hosts_store = true;
    return record::Join(record, rules, me, now);
  });
  other.join();
  const RunRecord record = first.Get();
  ASSERT_TRUE(record.round_closed);
  ASSERT_EQ(record.members.size(), 2u);
  // A fixed world numbers them in the order their writes landed.
  std::set<std::string> owners;
  for (size_t slot = 0; slot < record.members.size(); ++slot) {
    EXPECT_EQ(record.members[slot].slot, static_cast<int>(slot));
    owners.insert(record.members[slot].owner);
  }
  EXPECT_EQ(owners, (std::set<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(record.version, 2);
}

// Node 0's TCP store holds the record for the whole run: the keys that
// watchers wait on stay bounded, and a value that is no record is refused.
TEST(TcpRunRecordStore, KeepsSixteenVersionKeysHoweverLongTheRunWrites) {
  std::unique_ptr<rendezvous::TcpStoreServer> server = rendezvous::TcpStoreServer::Start();
  std::unique_ptr<rendezvous::TcpStoreClient> client =
      rendezvous::TcpStoreClient::Connect("127.0.0.1", server->port(), seconds(10));
  std::unique_ptr<RunRecordStore> store = MakeKeyRunRecordStore(*client);
  for (int version = 0; version < 40; ++version) {
    ASSERT_TRUE(store->CompareAndSet(version, WithAttempt(version)).stored);
  }
  EXPECT_EQ(server->num_keys(), 1u + 16u);  // the record, versions 25..40
  EXPECT_FALSE(client->Check({"infini_run/record_version/24"}));
  EXPECT_TRUE(client->Check({"infini_run/record_version/25", "infini_run/record_version/40"}));
}

TEST(TcpRunRecordStore, AValueThatIsNoRecordIsRefusedInOneLine) {
  std::unique_ptr<rendezvous::TcpStoreServer> server = rendezvous::TcpStoreServer::Start();
  std::unique_ptr<rendezvous::TcpStoreClient> client =
      rendezvous::TcpStoreClient::Connect("127.0.0.1", server->port(), seconds(10));
  std::unique_ptr<RunRecordStore> store = MakeKeyRunRecordStore(*client);
  client->Set("infini_run/record", "garbage");
  try {
    store->Get();
    ADD_FAILURE() << "a value without a write id was read as a record";
  } catch (const RunRecordError& error) {
    EXPECT_STREQ(error.what(),
                 "run record at 'infini_run/record': expected '<write id> <JSON>', got no write "
                 "id");
  }
  client->Set("infini_run/record", "1.1 {\"version\":1}");
  try {
    store->Get();
    ADD_FAILURE() << "a record without its fields was read";
  } catch (const RunRecordError& error) {
    EXPECT_STREQ(error.what(), "run record: 'round': expected a field (it is missing)");
  }
}

}  // namespace
}  // namespace infini::launch
