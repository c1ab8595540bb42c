// On-close keys (Store::SetOnClose): a client in a child process registers a
// key and is killed (or leaves cleanly after cancelling it); the parent, a
// client of the store, sees the key set at once (or never). Directly, through
// a relay, and with the relay itself killed along with its client (a
// launcher hosts its node's relay).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "infini/rendezvous/tcp_store.h"
#include "store_test_util.h"

namespace infini::rendezvous {
namespace {

using std::chrono::milliseconds;
using testing::ConnectTo;
using testing::ElapsedSince;
using testing::Eventually;
using testing::StartLocalServer;
using testing::StartRelayOf;

// A child process forked before the test starts any thread: it reads the
// store's port, runs `body` (which registers its keys and must keep what
// it connected alive), says so, and stays until the parent closes its pipe.
class Child {
 public:
  using Body = std::function<std::shared_ptr<void>(uint16_t port)>;
  explicit Child(const Body& body) {
    int to_child[2];
    int from_child[2];
    EXPECT_EQ(::pipe(to_child), 0);
    EXPECT_EQ(::pipe(from_child), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      uint16_t port = 0;
      if (::read(to_child[0], &port, sizeof(port)) != sizeof(port)) ::_exit(1);
      std::shared_ptr<void> alive;
      try {
        alive = body(port);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "child: %s\n", error.what());
        ::_exit(1);
      }
      char done = 'r';
      if (::write(from_child[1], &done, 1) != 1) ::_exit(1);
      while (::read(to_child[0], &done, 1) > 0) {
      }
      // A clean leave: the client's connection closes as the process exits.
      ::_exit(0);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    to_child_ = to_child[1];
    from_child_ = from_child[0];
  }
  ~Child() {
    Leave();
    if (from_child_ >= 0) ::close(from_child_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }

  // Gives the child the port and waits until its body ran.
  bool Start(uint16_t port) {
    char done = 0;
    return ::write(to_child_, &port, sizeof(port)) == sizeof(port) &&
           ::read(from_child_, &done, 1) == 1 && done == 'r';
  }
  void Kill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Lets the child exit on its own.
  void Leave() {
    if (to_child_ >= 0) ::close(to_child_);
    to_child_ = -1;
  }
  int ExitStatus() {
    int status = -1;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
};

std::shared_ptr<void> RegisterThrough(uint16_t port, const std::string& key,
                                      const std::string& value) {
  std::shared_ptr<TcpStoreClient> client =
      TcpStoreClient::Connect("127.0.0.1", port, milliseconds(5000));
  client->SetOnClose(key, value);
  return client;
}

// Waits (1 s at most) on `key` in `store` and returns its value.
std::string WaitAtMostOneSecond(TcpStoreClient& store, const std::string& key) {
  const auto start = std::chrono::steady_clock::now();
  store.Wait({key}, milliseconds(1000));
  EXPECT_LT(ElapsedSince(start).count(), 1000);
  return store.Get(key);
}

TEST(OnCloseKeyTest, AKilledClientsKeyIsSetAtOnce) {
  Child child([](uint16_t port) { return RegisterThrough(port, "run/node/1/closed", "killed"); });
  auto server = StartLocalServer();
  ASSERT_TRUE(child.Start(server->port()));
  auto parent = ConnectTo(*server);
  EXPECT_FALSE(parent->Check({"run/node/1/closed"}));
  child.Kill();
  EXPECT_EQ(WaitAtMostOneSecond(*parent, "run/node/1/closed"), "killed");
}

TEST(OnCloseKeyTest, ACancelledKeyIsNotSetWhenItsClientLeavesAndAnotherIs) {
  for (const bool relayed : {false, true}) {
    SCOPED_TRACE(relayed ? "through a relay" : "direct");
    Child child([](uint16_t port) {
      auto client = RegisterThrough(port, "run/cancelled", "set");
      auto* store = static_cast<TcpStoreClient*>(client.get());
      store->SetOnClose("run/kept", "first");
      store->SetOnClose("run/kept", "replaced");
      store->CancelOnClose("run/cancelled");
      return client;
    });
    auto server = StartLocalServer();
    std::unique_ptr<TcpStoreServer> relay;
    if (relayed) relay = StartRelayOf(server->port());
    ASSERT_TRUE(child.Start(relayed ? relay->port() : server->port()));
    auto parent = ConnectTo(*server);
    child.Leave();
    EXPECT_EQ(child.ExitStatus(), 0);
    // Any close sets what was not cancelled, a clean one too.
    EXPECT_EQ(WaitAtMostOneSecond(*parent, "run/kept"), "replaced");
    if (relay) {
      ASSERT_TRUE(Eventually([&] { return relay->num_connections() == 0; }));
      ASSERT_TRUE(Eventually([&] { return relay->relay_counts().queued == 0; }));
    }
    EXPECT_FALSE(parent->Check({"run/cancelled"}));
    EXPECT_FALSE(parent->DeleteKey("run/cancelled"));
  }
}

TEST(OnCloseKeyTest, AKilledClientOfARelaySetsItsKeyUpstream) {
  Child child([](uint16_t port) { return RegisterThrough(port, "run/node/1/closed", "killed"); });
  auto server = StartLocalServer();
  auto relay = StartRelayOf(server->port());
  ASSERT_TRUE(child.Start(relay->port()));
  auto parent = ConnectTo(*server);
  EXPECT_FALSE(parent->Check({"run/node/1/closed"}));
  child.Kill();
  EXPECT_EQ(WaitAtMostOneSecond(*parent, "run/node/1/closed"), "killed");
  EXPECT_EQ(relay->num_keys(), 0u);
}

// A launcher hosts its node's relay: killed, both go at once, and the store
// sets the key when the relay's own connection closes.
TEST(OnCloseKeyTest, AKilledRelaySetsTheKeysOfItsClientsUpstream) {
  Child child([](uint16_t upstream_port) {
    struct RelayAndClient {
      std::shared_ptr<TcpStoreServer> relay;
      std::shared_ptr<void> client;
    };
    auto both = std::make_shared<RelayAndClient>();
    both->relay = StartRelayOf(upstream_port);
    both->client = RegisterThrough(both->relay->port(), "run/node/1/closed", "relay killed");
    return std::shared_ptr<void>(both);
  });
  auto server = StartLocalServer();
  ASSERT_TRUE(child.Start(server->port()));
  auto parent = ConnectTo(*server);
  EXPECT_FALSE(parent->Check({"run/node/1/closed"}));
  child.Kill();
  EXPECT_EQ(WaitAtMostOneSecond(*parent, "run/node/1/closed"), "relay killed");
}

TEST(OnCloseKeyTest, AConnectionHoldingKeysIsNotClosedForIdleness) {
  TcpStoreServerOptions options;
  options.idle_timeout = milliseconds(40);
  auto server = TcpStoreServer::Start(options);
  auto holder = ConnectTo(*server);
  holder->SetOnClose("run/holder/closed", "1");
  auto idle = ConnectTo(*server);
  // The idle one is closed by the sweep; the holder, idle for longer, is not
  // (closed, it would have set its key).
  ASSERT_TRUE(Eventually([&] { return server->num_connections() == 1; }));
  EXPECT_EQ(server->num_keys(), 0u);
  EXPECT_NO_THROW(holder->CancelOnClose("run/holder/closed"));
}

TEST(OnCloseKeyTest, OtherStoresSayTheyHaveNone) {
  struct NoKeys : Store {
    void Set(const std::string&, const std::string&) override {}
    std::string Get(const std::string&) override { return ""; }
    int64_t Add(const std::string&, int64_t) override { return 0; }
    std::string CompareSet(const std::string&, const std::string&, const std::string&) override {
      return "";
    }
    bool DeleteKey(const std::string&) override { return false; }
    bool Check(const std::vector<std::string>&) override { return false; }
    void Wait(const std::vector<std::string>&, milliseconds) override {}
  } store;
  EXPECT_THROW(store.SetOnClose("k", "v"), StoreError);
}

}  // namespace
}  // namespace infini::rendezvous
