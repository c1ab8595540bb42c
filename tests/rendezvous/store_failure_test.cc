// What users see when the store is missing, gone, or cannot start.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <thread>

#include "infini/rendezvous/tcp_store.h"
#include "store_test_util.h"
#include "unused_port.h"

namespace infini::rendezvous {
namespace {

using std::chrono::milliseconds;
using testing::ConnectTo;
using testing::ElapsedSince;
using testing::Eventually;
using testing::StartLocalServer;

// A local port on which nothing listens (right after this returns).
uint16_t UnusedPort() { return infini::testing::UnusedPortBelowEphemeralRange(); }

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(TcpStoreFailureTest, ConnectFailsNamingEndpointAndReasonWhenNoServerListens) {
  const uint16_t port = UnusedPort();
  const auto start = std::chrono::steady_clock::now();
  try {
    TcpStoreClient::Connect("127.0.0.1", port, milliseconds(300));
    FAIL() << "connected";
  } catch (const StoreError& error) {
    const std::string message = error.what();
    EXPECT_TRUE(Contains(message, "could not connect to store at 127.0.0.1:" +
                                      std::to_string(port) + " after 0.3s: Connection refused"))
        << message;
  }
  EXPECT_GE(ElapsedSince(start), milliseconds(290));
  EXPECT_LT(ElapsedSince(start), milliseconds(1500));
}

TEST(TcpStoreFailureTest, ConnectRetriesUntilTheServerStarts) {
  const uint16_t port = UnusedPort();
  auto client = std::async(std::launch::async, [port] {
    return TcpStoreClient::Connect("127.0.0.1", port, milliseconds(3000));
  });
  std::this_thread::sleep_for(milliseconds(200));
  TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  auto server = TcpStoreServer::Start(options);
  auto connected = client.get();
  connected->Set("k", "v");
  EXPECT_EQ(connected->Get("k"), "v");
}

TEST(TcpStoreFailureTest, ConnectNamesAHostThatDoesNotResolve) {
  try {
    TcpStoreClient::Connect("no-such-host.invalid", 29400, milliseconds(100));
    FAIL() << "connected";
  } catch (const StoreError& error) {
    EXPECT_TRUE(Contains(error.what(), "no-such-host.invalid:29400")) << error.what();
    EXPECT_TRUE(Contains(error.what(), "cannot resolve host")) << error.what();
  }
}

TEST(TcpStoreFailureTest, PendingGetFailsQuicklyWhenTheServerStops) {
  auto server = StartLocalServer();
  const uint16_t port = server->port();
  auto client = ConnectTo(*server, milliseconds(30000));
  auto value = std::async(std::launch::async, [&] { return client->Get("never"); });
  ASSERT_TRUE(Eventually([&] { return server->num_waiters() == 1; }));
  const auto start = std::chrono::steady_clock::now();
  server.reset();
  try {
    value.get();
    FAIL() << "Get returned";
  } catch (const StoreTimeoutError& error) {
    FAIL() << "a dead server must not look like a timeout: " << error.what();
  } catch (const StoreError& error) {
    const std::string message = error.what();
    EXPECT_TRUE(Contains(message, "127.0.0.1:" + std::to_string(port))) << message;
    EXPECT_TRUE(Contains(message, "'never'")) << message;
    EXPECT_TRUE(Contains(message, "closed the connection")) << message;
  }
  EXPECT_LT(ElapsedSince(start), milliseconds(1500));
}

TEST(TcpStoreFailureTest, CallsFailQuicklyOnceTheServerIsGone) {
  auto server = StartLocalServer();
  auto client = ConnectTo(*server, milliseconds(30000));
  client->Set("k", "v");
  server.reset();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(client->Set("k", "w"), StoreError);
  // The connection stays broken, with the original reason.
  try {
    client->Get("k");
    FAIL() << "Get returned";
  } catch (const StoreError& error) {
    EXPECT_TRUE(Contains(error.what(), "earlier call broke the connection")) << error.what();
  }
  EXPECT_LT(ElapsedSince(start), milliseconds(1500));
}

TEST(TcpStoreFailureTest, StartFailsNamingEndpointWhenThePortIsInUse) {
  auto first = StartLocalServer();
  TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  options.port = first->port();
  try {
    TcpStoreServer::Start(options);
    FAIL() << "two servers bound one port";
  } catch (const StoreError& error) {
    const std::string message = error.what();
    EXPECT_TRUE(Contains(message, "127.0.0.1:" + std::to_string(first->port()))) << message;
    EXPECT_TRUE(Contains(message, "address already in use")) << message;
  }
  // The first server is unharmed.
  ConnectTo(*first)->Set("k", "v");
}

TEST(TcpStoreFailureTest, StartFailsNamingAnAddressThisHostDoesNotHave) {
  TcpStoreServerOptions options;
  options.host = "192.0.2.1";  // TEST-NET-1: never a local address
  try {
    TcpStoreServer::Start(options);
    FAIL() << "bound a foreign address";
  } catch (const StoreError& error) {
    EXPECT_TRUE(Contains(error.what(), "192.0.2.1:0")) << error.what();
  }
}

TEST(TcpStoreFailureTest, ServerCanRebindThePortOfAStoppedServerAtOnce) {
  auto server = StartLocalServer();
  const uint16_t port = server->port();
  ConnectTo(*server)->Set("k", "v");  // leaves a connection in TIME_WAIT
  server.reset();
  TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  auto restarted = TcpStoreServer::Start(options);
  EXPECT_EQ(restarted->port(), port);
}

TEST(TcpStoreFailureTest, ServerStopsCleanlyWithManyClientsConnectedAndWaiting) {
  auto server = StartLocalServer();
  std::vector<std::unique_ptr<TcpStoreClient>> clients;
  std::vector<std::future<void>> waits;
  for (int i = 0; i < 16; ++i) clients.push_back(ConnectTo(*server, milliseconds(30000)));
  for (auto& client : clients) {
    waits.push_back(std::async(std::launch::async,
                               [&client] { EXPECT_THROW(client->Wait({"never"}), StoreError); }));
  }
  ASSERT_TRUE(Eventually([&] { return server->num_waiters() == 16; }));
  server.reset();
  for (auto& wait : waits) wait.get();
}

}  // namespace
}  // namespace infini::rendezvous
