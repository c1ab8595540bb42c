// The gloo plugin's private bootstrap server (started by get_unique_id when the
// host lends no store): it listens on the address gloo chose, never on every
// interface, and refuses a client that does not prove the random token the
// unique id carries (bytes 24..55, ccl_backends/gloo/src/unique_id.h).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "infini/ccl/ccl.h"
#include "infini/rendezvous/store.h"
#include "infini/rendezvous/tcp_store.h"

namespace {

using namespace std::chrono_literals;
namespace ccl = infini::ccl;

constexpr size_t kPortOffset = 8;
constexpr size_t kTokenOffset = 24;
constexpr size_t kTokenBytes = 32;
constexpr size_t kHostLengthOffset = 6;
constexpr size_t kHostOffset = 56;

const std::shared_ptr<const ccl::Backend>& Gloo() {
  static const auto backend = ccl::Backend::Load("gloo");
  return backend;
}

struct PrivateStoreAddress {
  std::string host;
  uint16_t port = 0;
  std::string token_hex;
};

PrivateStoreAddress AddressIn(const ccl::UniqueId& id) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(id.bytes().data());
  PrivateStoreAddress address;
  address.host.assign(reinterpret_cast<const char*>(bytes + kHostOffset), bytes[kHostLengthOffset]);
  address.port = static_cast<uint16_t>(bytes[kPortOffset] << 8 | bytes[kPortOffset + 1]);
  static constexpr char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < kTokenBytes; ++i) {
    address.token_hex += kDigits[bytes[kTokenOffset + i] >> 4];
    address.token_hex += kDigits[bytes[kTokenOffset + i] & 0xf];
  }
  return address;
}

TEST(GlooPrivateStore, ListensOnTheChosenAddressAndCarriesAToken) {
  const PrivateStoreAddress address = AddressIn(Gloo()->GetUniqueId());
  in6_addr parsed{};
  EXPECT_TRUE(inet_pton(AF_INET, address.host.c_str(), &parsed) == 1 ||
              inet_pton(AF_INET6, address.host.c_str(), &parsed) == 1)
      << address.host;
  EXPECT_NE(address.host, "0.0.0.0");
  EXPECT_NE(address.host, "::");
  EXPECT_NE(address.token_hex, std::string(2 * kTokenBytes, '0'));
  EXPECT_NE(address.port, 0);
}

TEST(GlooPrivateStore, AStrangerWithoutTheTokenIsRefusedAndTheTokenIsAccepted) {
  const PrivateStoreAddress address = AddressIn(Gloo()->GetUniqueId());
  EXPECT_THROW(infini::rendezvous::TcpStoreClient::Connect(address.host, address.port, 5s),
               infini::rendezvous::StoreError);
  EXPECT_THROW(infini::rendezvous::TcpStoreClient::Connect(address.host, address.port, 5s,
                                                           std::string(64, '0')),
               infini::rendezvous::StoreError);
  auto client = infini::rendezvous::TcpStoreClient::Connect(address.host, address.port, 5s,
                                                            address.token_hex);
  client->Set("private_store_test/key", "value");
  EXPECT_EQ(client->Get("private_store_test/key"), "value");
}

TEST(GlooPrivateStore, AnIdWithAForgedTokenFailsInitWithAnError) {
  std::string bytes = Gloo()->GetUniqueId().bytes();
  bytes[kTokenOffset] = static_cast<char>(bytes[kTokenOffset] ^ 0x5a);
  ccl::CommConfig config;
  config.timeout_ms = 10000;
  try {
    (void)Gloo()->CommInitRank(1, ccl::UniqueId(bytes), 0, config);
    FAIL() << "a forged token was accepted";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("token"), std::string::npos) << error.what();
  }
}

TEST(GlooPrivateStore, RanksOfTheRealIdMeetThroughIt) {
  const ccl::UniqueId id = Gloo()->GetUniqueId();
  ccl::Communicator comm = Gloo()->CommInitRank(1, id, 0);
  EXPECT_EQ(comm.world_size(), 1);
}

}  // namespace
