// EtcdStore against a real etcd: the Store contract, leases, watches and the
// run secret's namespace.
#include "infini/rendezvous/etcd_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "etcd_cluster.h"

namespace infini::etcd_testing {
namespace {

using rendezvous::EtcdEvent;
using rendezvous::EtcdStore;
using rendezvous::EtcdStoreOptions;
using rendezvous::StoreError;
using rendezvous::StoreTimeoutError;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

EtcdStoreOptions OptionsFor(const EtcdCluster& cluster, const std::string& prefix) {
  EtcdStoreOptions options;
  options.endpoints = cluster.endpoint_list();
  options.key_prefix = prefix;
  return options;
}

TEST(EtcdStore, KeepsTheStoreContract) {
  EtcdCluster cluster(1);
  auto store = EtcdStore::Connect(OptionsFor(cluster, "contract/"));
  store->Set("a", std::string("x\0y", 3));
  EXPECT_EQ(store->Get("a"), std::string("x\0y", 3));
  EXPECT_EQ(store->Add("counter", 5), 5);
  EXPECT_EQ(store->Add("counter", -2), 3);
  EXPECT_EQ(store->CompareSet("cas", "", "first"), "first");
  EXPECT_EQ(store->CompareSet("cas", "", "second"), "first");
  EXPECT_EQ(store->CompareSet("cas", "first", "third"), "third");
  EXPECT_EQ(store->CompareSet("missing", "something", "x"), "something");
  EXPECT_FALSE(store->Check({"missing"}));
  EXPECT_TRUE(store->Check({"a", "counter", "cas"}));
  EXPECT_FALSE(store->Check({"a", "missing"}));
  EXPECT_TRUE(store->DeleteKey("a"));
  EXPECT_FALSE(store->DeleteKey("a"));
  EXPECT_THROW(store->Wait({"never"}, milliseconds(300)), StoreTimeoutError);
}

TEST(EtcdStore, AddIsAtomicAcrossClients) {
  EtcdCluster cluster(1);
  constexpr int kClients = 4, kAdds = 25;
  std::vector<std::thread> clients;
  for (int client = 0; client < kClients; ++client) {
    clients.emplace_back([&] {
      auto store = EtcdStore::Connect(OptionsFor(cluster, "add/"));
      for (int i = 0; i < kAdds; ++i) store->Add("n", 1);
    });
  }
  for (auto& client : clients) client.join();
  EXPECT_EQ(EtcdStore::Connect(OptionsFor(cluster, "add/"))->Add("n", 0), kClients * kAdds);
}

// The run record's compare-and-set (launch/src/run_record_store.cc): a put
// holds only while the key's revision is the one its writer read.
TEST(EtcdStore, PutIfRevisionPutsOnlyOnTheRevisionItWasGiven) {
  EtcdCluster cluster(1);
  auto first = EtcdStore::Connect(OptionsFor(cluster, "revision/"));
  auto second = EtcdStore::Connect(OptionsFor(cluster, "revision/"));
  EXPECT_FALSE(first->GetRevisioned("record"));
  const EtcdStore::RevisionedPut created = first->PutIfRevision("record", 0, "one");
  ASSERT_TRUE(created.put);
  ASSERT_TRUE(created.now);
  const std::optional<EtcdStore::Revisioned> read = second->GetRevisioned("record");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->value, "one");
  EXPECT_EQ(read->mod_revision, created.now->mod_revision);
  // Created already: a second create answers what is there.
  const EtcdStore::RevisionedPut late = second->PutIfRevision("record", 0, "other");
  EXPECT_FALSE(late.put);
  ASSERT_TRUE(late.now);
  EXPECT_EQ(late.now->value, "one");
  const EtcdStore::RevisionedPut updated =
      second->PutIfRevision("record", read->mod_revision, "two");
  ASSERT_TRUE(updated.put);
  EXPECT_GT(updated.now->mod_revision, read->mod_revision);
  // `first` still holds the revision of "one": its put loses to "two".
  const EtcdStore::RevisionedPut stale =
      first->PutIfRevision("record", created.now->mod_revision, "three");
  EXPECT_FALSE(stale.put);
  EXPECT_EQ(stale.now->value, "two");
  EXPECT_EQ(stale.now->mod_revision, updated.now->mod_revision);
}

TEST(EtcdStore, GetWaitsForAKeySetLater) {
  EtcdCluster cluster(1);
  auto reader = EtcdStore::Connect(OptionsFor(cluster, "wait/"));
  std::thread writer([&] {
    // The reader is already waiting or not yet: either way Get must see it.
    EtcdStore::Connect(OptionsFor(cluster, "wait/"))->Set("late", "here");
  });
  reader->set_timeout(seconds(20));
  EXPECT_EQ(reader->Get("late"), "here");
  writer.join();
}

TEST(EtcdStore, KeysOfAnExpiredLeaseVanishAndTheWatchSaysSo) {
  EtcdCluster cluster(1);
  auto watcher = EtcdStore::Connect(OptionsFor(cluster, "lease/"));
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<EtcdEvent> events;
  watcher->Watch("", [&](const EtcdEvent& event) {
    std::lock_guard lock(mutex);
    events.push_back(event);
    changed.notify_all();
  });
  {
    EtcdStoreOptions leased = OptionsFor(cluster, "lease/");
    leased.lease_ttl = seconds(2);
    auto holder = EtcdStore::Connect(leased);
    holder->Set("alive/1", "me");
    // Destroying the store stops the keep-alive: the lease runs out.
  }
  std::unique_lock lock(mutex);
  const bool deleted = changed.wait_for(lock, seconds(20), [&] {
    for (const EtcdEvent& event : events) {
      if (event.deleted && event.key == "alive/1") return true;
    }
    return false;
  });
  ASSERT_TRUE(deleted) << "the lease's key was not deleted within 20 s";
  EXPECT_FALSE(events.front().deleted);
  EXPECT_EQ(events.front().value, "me");
  EXPECT_FALSE(watcher->Check({"alive/1"}));
}

TEST(EtcdStore, ALiveLeaseOutlivesItsTimeToLive) {
  EtcdCluster cluster(1);
  EtcdStoreOptions leased = OptionsFor(cluster, "kept/");
  leased.lease_ttl = seconds(1);
  auto holder = EtcdStore::Connect(leased);
  holder->Set("alive/0", "me");
  auto reader = EtcdStore::Connect(OptionsFor(cluster, "kept/"));
  // Polls for a bounded time, longer than two lifetimes of the lease.
  const auto until = Clock::now() + seconds(4);
  while (Clock::now() < until) {
    ASSERT_TRUE(reader->Check({"alive/0"})) << "the kept-alive lease expired";
    std::this_thread::sleep_for(milliseconds(200));
  }
  EXPECT_TRUE(holder->lease_alive());
}

TEST(EtcdStore, RunPrefixDependsOnTheSecret) {
  EtcdCluster cluster(1);
  const std::string ours = rendezvous::EtcdRunPrefix("job", "secret-a");
  EXPECT_EQ(ours, rendezvous::EtcdRunPrefix("job", "secret-a"));
  EXPECT_NE(ours, rendezvous::EtcdRunPrefix("job", "secret-b"));
  EXPECT_THAT(ours, ::testing::StartsWith("infini_run/job/"));
  EXPECT_THAT(ours, ::testing::Not(HasSubstr("secret")));
  EtcdStore::Connect(OptionsFor(cluster, ours))->Set("config", "x");
  EXPECT_FALSE(EtcdStore::Connect(OptionsFor(cluster, rendezvous::EtcdRunPrefix("job", "guess")))
                   ->Check({"config"}));
}

TEST(EtcdStore, FailsOverToAnotherMember) {
  EtcdCluster cluster(3);
  auto store = EtcdStore::Connect(OptionsFor(cluster, "failover/"));
  store->Set("before", "1");
  cluster.Kill(0);  // the member the store talks to first
  store->Set("after", "2");
  EXPECT_EQ(store->Get("before"), "1");
  EXPECT_EQ(store->Get("after"), "2");
}

// etcd's own authentication: the user's token rides on every call, the
// lease's keep-alive and the watches included; a wrong password or none is
// one error at Connect.
TEST(EtcdStore, AnAuthenticatedClusterServesItsUserAndRefusesOthers) {
  EtcdCluster cluster(1);
  cluster.EnableAuthentication("the-root-password");
  EtcdStoreOptions options = OptionsFor(cluster, "auth/");
  options.user = "root";
  options.password = "the-root-password";
  options.lease_ttl = seconds(2);
  auto reader = EtcdStore::Connect(options);
  std::thread writer([&] { EtcdStore::Connect(options)->Set("late", "here"); });
  reader->set_timeout(seconds(20));
  EXPECT_EQ(reader->Get("late"), "here");  // a watch, with the token
  writer.join();
  std::this_thread::sleep_for(seconds(3));  // longer than the lease: kept alive with the token
  reader->Set("leased", "1");
  EXPECT_TRUE(reader->Check({"leased"}));

  options.password = "not-the-password";
  try {
    EtcdStore::Connect(options);
    FAIL() << "a wrong password was accepted";
  } catch (const StoreError& error) {
    EXPECT_THAT(error.what(), HasSubstr("authentication failed"));
  }
  options.user.clear();
  options.password.clear();
  try {
    EtcdStore::Connect(options);
    FAIL() << "a client without a user was served by a cluster with authentication on";
  } catch (const StoreError& error) {
    EXPECT_THAT(error.what(), HasSubstr("user name is empty"));
  }
}

TEST(EtcdStore, NoMemberIsOneErrorNamingThemAll) {
  EtcdStoreOptions options;
  const int port = launch::testing::FreePort();
  options.endpoints = {"127.0.0.1:" + std::to_string(port)};
  options.key_prefix = "x/";
  try {
    EtcdStore::Connect(options);
    FAIL() << "connected to nothing";
  } catch (const StoreError& error) {
    EXPECT_THAT(error.what(), HasSubstr("127.0.0.1:" + std::to_string(port)));
  }
}

}  // namespace
}  // namespace infini::etcd_testing
