// parallel::UniqueIdExchange on its own: the launcher's store from the
// variables infini_run sets, keys under the run and its attempt, a
// generation per group made, and one clear error naming the group when the
// root never publishes.
#include "infini/parallel/unique_id_exchange.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "infini/parallel/errors.h"
#include "infini/rendezvous/tcp_store.h"

namespace infini::parallel {
namespace {

using namespace std::chrono_literals;

constexpr const char* kToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

class UniqueIdExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rendezvous::TcpStoreServerOptions options;
    options.token = kToken;
    server_ = rendezvous::TcpStoreServer::Start(options);
  }

  // What infini_run gives a rank (docs/launcher.md).
  UniqueIdExchangeOptions Launched(const std::string& run_id, const std::string& restart = "0") {
    UniqueIdExchangeOptions options;
    options.environment = Environment{{"INFINI_STORE_ADDR", "127.0.0.1"},
                                      {"INFINI_STORE_PORT", std::to_string(server_->port())},
                                      {"INFINI_RUN_TOKEN", kToken},
                                      {"INFINI_RUN_ID", run_id},
                                      {"TORCHELASTIC_RESTART_COUNT", restart}};
    options.timeout = 10s;
    return options;
  }

  std::shared_ptr<rendezvous::Store> RawClient() {
    return rendezvous::TcpStoreClient::Connect("127.0.0.1", server_->port(), 5s, kToken);
  }

  std::unique_ptr<rendezvous::TcpStoreServer> server_;
};

const ccl::UniqueId kFirst = ccl::UniqueId::FromBytes(std::string(128, '\1'));
const ccl::UniqueId kSecond = ccl::UniqueId::FromBytes(std::string(128, '\2'));

TEST_F(UniqueIdExchangeTest, RootPublishesUnderTheRunAndOthersReceive) {
  UniqueIdExchange root(Launched("job7"));
  UniqueIdExchange other(Launched("job7"));
  root.Publish("world", kFirst, 0);
  EXPECT_EQ(other.Receive("world", 0), kFirst);
  EXPECT_EQ(root.KeyOf("world", 0), "job7/0/unique_id/world/0");
  EXPECT_EQ(RawClient()->Get("job7/0/unique_id/world/0"), kFirst.ToBytes());
}

TEST_F(UniqueIdExchangeTest, EachPublishOfAGroupIsItsNextGeneration) {
  UniqueIdExchange root(Launched("job8"));
  root.Publish("tp0", kFirst);
  root.Publish("tp0", kSecond);
  EXPECT_EQ(RawClient()->Get("job8/0/unique_id/tp0/0"), kFirst.ToBytes());
  EXPECT_EQ(RawClient()->Get("job8/0/unique_id/tp0/1"), kSecond.ToBytes());
}

TEST_F(UniqueIdExchangeTest, EachReceiveOfAGroupWaitsForItsNextGeneration) {
  UniqueIdExchange root(Launched("job9"));
  root.Publish("dp1", kFirst, 0);
  root.Publish("dp1", kSecond, 1);
  UniqueIdExchange other(Launched("job9"));
  EXPECT_EQ(other.Receive("dp1"), kFirst);
  EXPECT_EQ(other.Receive("dp1"), kSecond);
}

TEST_F(UniqueIdExchangeTest, AnotherRunOrAttemptNeverReadsTheId) {
  UniqueIdExchange root(Launched("job10"));
  root.Publish("world", kFirst, 0);
  UniqueIdExchangeOptions elsewhere = Launched("job11");
  elsewhere.timeout = 200ms;
  EXPECT_THROW(UniqueIdExchange(elsewhere).Receive("world", 0), ParallelError);
  UniqueIdExchangeOptions restarted = Launched("job10", "1");
  restarted.timeout = 200ms;
  EXPECT_THROW(UniqueIdExchange(restarted).Receive("world", 0), ParallelError);
}

TEST_F(UniqueIdExchangeTest, MissingRootIsOneErrorNamingTheGroup) {
  UniqueIdExchangeOptions options = Launched("job12");
  options.timeout = 200ms;
  UniqueIdExchange other(options);
  try {
    other.Receive("pp3", 0);
    FAIL() << "no root published, yet an id arrived";
  } catch (const ParallelError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("group 'pp3' (generation 0): no id from its root within 200 ms"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("job12/0/unique_id/pp3/0"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_F(UniqueIdExchangeTest, GroupNameWithASlashIsRefused) {
  UniqueIdExchange root(Launched("job13"));
  EXPECT_THROW(root.Publish("a/b", kFirst), ParallelUsageError);
  EXPECT_THROW(root.Receive(""), ParallelUsageError);
}

TEST(UniqueIdExchangeAlone, OneProcessWithoutALauncherHostsItsOwnStore) {
  UniqueIdExchangeOptions options;
  options.environment = Environment{};
  options.timeout = 5s;
  UniqueIdExchange root(options);
  UniqueIdExchange other(options);
  root.Publish("solo", kFirst, 0);
  EXPECT_EQ(other.Receive("solo", 0), kFirst);
}

TEST(UniqueIdExchangeAlone, AStoreAddressWithoutItsPortIsAConfigError) {
  UniqueIdExchangeOptions options;
  options.environment = Environment{{"INFINI_STORE_ADDR", "127.0.0.1"}};
  EXPECT_THROW(UniqueIdExchange{options}, ParallelConfigError);
}

}  // namespace
}  // namespace infini::parallel
