// What users see when the store is missing, gone, or cannot start.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <thread>
#include <vector>

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

// The client library says nothing by itself; given a reporter, Connect tells
// it while it waits (first after `first`, then every `every`) and never after
// it gave up.
TEST(TcpStoreFailureTest, ConnectTellsItsReporterWhileItWaitsAndNothingAfterItGivesUp) {
  const uint16_t port = UnusedPort();
  std::vector<ConnectWait> reports;
  ConnectProgress progress;
  progress.first = milliseconds(200);
  progress.every = milliseconds(300);
  progress.report = [&reports](const ConnectWait& wait) { reports.push_back(wait); };
  const auto start = std::chrono::steady_clock::now();
  const auto wall_start = std::chrono::system_clock::now();
  EXPECT_THROW(TcpStoreClient::Connect("127.0.0.1", port, milliseconds(1400), "", progress),
               StoreError);
  EXPECT_GE(ElapsedSince(start), milliseconds(1390));
  // At 0.2, 0.5, 0.8 and 1.1 s; a loaded machine may fall behind by one.
  ASSERT_GE(reports.size(), 3u);
  ASSERT_LE(reports.size(), 4u);
  EXPECT_GE(reports[0].waited, milliseconds(200));
  EXPECT_LT(reports[0].waited, milliseconds(700));
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].endpoint, "127.0.0.1:" + std::to_string(port));
    EXPECT_EQ(reports[i].last_failure, "Connection refused");
    EXPECT_LE(std::chrono::abs(reports[i].since - wall_start), milliseconds(100));
    // waited + left is the connect timeout.
    EXPECT_NEAR(static_cast<double>((reports[i].waited + reports[i].left).count()), 1400.0, 20.0);
    // On a fixed schedule: a late report does not make the next one late.
    if (i > 0) {
      EXPECT_GE(reports[i].waited - reports[i - 1].waited, milliseconds(100));
      EXPECT_GE(reports[i].waited, milliseconds(200 + 300 * static_cast<int>(i)));
    }
  }
  const size_t after = reports.size();
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_EQ(reports.size(), after);
}

TEST(TcpStoreFailureTest, ConnectSaysNothingToItsReporterWhenTheStoreAnswersAtOnce) {
  auto server = StartLocalServer();
  int reports = 0;
  ConnectProgress progress;
  progress.first = milliseconds(0);
  progress.report = [&reports](const ConnectWait&) { ++reports; };
  auto client =
      TcpStoreClient::Connect("127.0.0.1", server->port(), milliseconds(2000), "", progress);
  client->Set("k", "v");
  EXPECT_EQ(reports, 0);
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
