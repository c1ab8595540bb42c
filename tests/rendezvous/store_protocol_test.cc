// The server against clients that do not follow the protocol: it refuses
// them, closes only their connection, and keeps serving everyone else.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "infini/rendezvous/tcp_store.h"
#include "raw_store_socket.h"
#include "store_test_util.h"
#include "wire_protocol.h"

namespace infini::rendezvous {
namespace {

using std::chrono::milliseconds;
using testing::ConnectTo;
using testing::Eventually;
using testing::StartLocalServer;
using wire::FrameWriter;
using wire::MessageType;

// A plain TCP socket to the local server, for sending arbitrary bytes.
class RawSocket {
 public:
  explicit RawSocket(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  }
  ~RawSocket() { ::close(fd_); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  void Send(const std::string& bytes) {
    EXPECT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

  // Reads until the server closes the connection (or 2 s pass: a failure);
  // returns what it sent.
  std::string ReadUntilClosed() {
    std::string received;
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(2000);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd descriptor{.fd = fd_, .events = POLLIN, .revents = 0};
      if (::poll(&descriptor, 1, 50) <= 0) continue;
      char buffer[4096];
      const ssize_t count = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (count <= 0) {
        closed_ = true;
        return received;
      }
      received.append(buffer, static_cast<size_t>(count));
    }
    ADD_FAILURE() << "the server did not close the connection";
    return received;
  }
  bool closed() const { return closed_; }

 private:
  int fd_;
  bool closed_ = false;
};

std::string Hello(uint32_t magic = wire::kMagic, uint32_t version = wire::kVersion) {
  return testing::HelloFrame(magic, version);
}

// The text of the kError frame at the start of `bytes`, or "" if none.
std::string ErrorText(const std::string& bytes) {
  if (bytes.size() < wire::kFrameHeaderBytes + 1) return "";
  wire::BodyReader reader(std::string_view(bytes).substr(wire::kFrameHeaderBytes));
  uint8_t type = 0;
  std::string text;
  if (!reader.U8(&type) || static_cast<MessageType>(type) != MessageType::kError ||
      !reader.Str(&text)) {
    return "";
  }
  return text;
}

// A well-behaved client keeps working on `server`.
void ExpectServing(const TcpStoreServer& server) {
  auto client = ConnectTo(server);
  client->Set("still", "serving");
  EXPECT_EQ(client->Get("still"), "serving");
}

TEST(TcpStoreProtocolTest, GarbageIsRefusedAndOthersAreStillServed) {
  auto server = StartLocalServer();
  auto bystander = ConnectTo(*server);
  RawSocket raw(server->port());
  raw.Send("GET / HTTP/1.1\r\nHost: store\r\n\r\n");
  raw.ReadUntilClosed();
  EXPECT_TRUE(raw.closed());
  bystander->Set("k", "v");
  EXPECT_EQ(bystander->Get("k"), "v");
  ExpectServing(*server);
}

TEST(TcpStoreProtocolTest, HelloWithAForeignMagicIsRefused) {
  auto server = StartLocalServer();
  RawSocket raw(server->port());
  raw.Send(Hello(/*magic=*/0xDEADBEEF));
  const std::string reply = raw.ReadUntilClosed();
  EXPECT_NE(ErrorText(reply).find("bad hello"), std::string::npos) << ErrorText(reply);
  ExpectServing(*server);
}

TEST(TcpStoreProtocolTest, HelloWithAnotherVersionIsRefusedNamingBothVersions) {
  auto server = StartLocalServer();
  RawSocket raw(server->port());
  raw.Send(Hello(wire::kMagic, /*version=*/99));
  const std::string text = ErrorText(raw.ReadUntilClosed());
  EXPECT_NE(text.find("version 99"), std::string::npos) << text;
  EXPECT_NE(text.find("version " + std::to_string(wire::kVersion)), std::string::npos) << text;
}

TEST(TcpStoreProtocolTest, RequestBeforeHelloIsRefused) {
  auto server = StartLocalServer();
  RawSocket raw(server->port());
  raw.Send(FrameWriter(MessageType::kSet).Str("k").Str("v").Finish());
  raw.ReadUntilClosed();
  EXPECT_TRUE(raw.closed());
  EXPECT_EQ(server->num_keys(), 0u);
}

TEST(TcpStoreProtocolTest, OversizedLengthIsRefusedBeforeItsBodyArrives) {
  auto server = StartLocalServer(/*max_message_bytes=*/1024);
  RawSocket raw(server->port());
  raw.Send(Hello());
  // Announces 1 GiB and sends none of it: the server must not wait or allocate.
  raw.Send(std::string("\x00\x00\x00\x40", 4));
  const std::string reply = raw.ReadUntilClosed();
  EXPECT_TRUE(raw.closed());
  ExpectServing(*server);
}

TEST(TcpStoreProtocolTest, ClientSendingTooLargeAValueGetsAClearError) {
  auto server = StartLocalServer(/*max_message_bytes=*/1024);
  auto client = ConnectTo(*server);
  try {
    client->Set("big", std::string(4096, 'x'));
    FAIL() << "an oversized value was stored";
  } catch (const StoreError& error) {
    EXPECT_NE(std::string(error.what()).find("max_message_bytes is 1024"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(server->num_keys(), 0u);
  client->Set("small", "fits");  // refused before sending: the connection is intact
  EXPECT_EQ(client->Get("small"), "fits");
}

TEST(TcpStoreProtocolTest, TruncatedAndUnknownRequestsAreRefused) {
  auto server = StartLocalServer();
  {
    RawSocket raw(server->port());
    // A key length of 1000 inside a 10-byte body.
    raw.Send(Hello() + FrameWriter(MessageType::kSet).U32(1000).U32(0).U8(0).Finish());
    raw.ReadUntilClosed();
    EXPECT_TRUE(raw.closed());
  }
  {
    RawSocket raw(server->port());
    raw.Send(Hello() + FrameWriter(static_cast<MessageType>(77)).Finish());
    const std::string reply = raw.ReadUntilClosed();
    EXPECT_TRUE(raw.closed());
  }
  {
    RawSocket raw(server->port());
    // A Wait claiming four billion keys.
    raw.Send(Hello() + FrameWriter(MessageType::kWait).U32(0xFFFFFFFF).I64(1000).Finish());
    raw.ReadUntilClosed();
    EXPECT_TRUE(raw.closed());
  }
  EXPECT_EQ(server->num_keys(), 0u);
  ExpectServing(*server);
}

TEST(TcpStoreProtocolTest, ClientLeavingMidMessageOrWhileWaitingLeavesNothingBehind) {
  auto server = StartLocalServer();
  {
    RawSocket half(server->port());
    half.Send(Hello() + std::string("\x20\x00\x00\x00\x02", 5));  // 1 of 32 body bytes
    RawSocket waiting(server->port());
    waiting.Send(Hello() + FrameWriter(MessageType::kGet).Str("never").I64(60000).Finish());
    ASSERT_TRUE(Eventually([&] { return server->num_waiters() == 1; }));
  }
  EXPECT_TRUE(Eventually([&] { return server->num_connections() == 0; }));
  EXPECT_EQ(server->num_waiters(), 0u);
  ExpectServing(*server);
}

TEST(TcpStoreProtocolTest, PipelinedRequestsAreAnsweredInOrder) {
  auto server = StartLocalServer();
  auto writer = ConnectTo(*server);
  RawSocket raw(server->port());
  // A blocking Get, then a Set: the Set must wait its turn.
  raw.Send(Hello() + FrameWriter(MessageType::kGet).Str("k").I64(60000).Finish() +
           FrameWriter(MessageType::kSet).Str("after").Str("1").Finish());
  ASSERT_TRUE(Eventually([&] { return server->num_waiters() == 1; }));
  EXPECT_FALSE(writer->Check({"after"}));
  writer->Set("k", "v");
  EXPECT_TRUE(Eventually([&] { return writer->Check({"after"}); }));
}

// A one-connection TCP server that answers the first message with `reply`,
// then keeps the connection open, silent, until destroyed.
class FakeServer {
 public:
  // Answers the first frame it gets with `reply`, then keeps what the client
  // sends after it until the client closes (or a few seconds pass).
  explicit FakeServer(std::string reply) : listener_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(::listen(listener_, 1), 0);
    socklen_t length = sizeof(address);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this, reply = std::move(reply)] {
      connection_ = ::accept(listener_, nullptr, nullptr);
      char buffer[256];
      (void)::recv(connection_, buffer, sizeof(buffer), 0);
      (void)::send(connection_, reply.data(), reply.size(), MSG_NOSIGNAL);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (std::chrono::steady_clock::now() < deadline) {
        pollfd descriptor{.fd = connection_, .events = POLLIN, .revents = 0};
        if (::poll(&descriptor, 1, 20) <= 0) continue;
        const ssize_t count = ::recv(connection_, buffer, sizeof(buffer), 0);
        if (count <= 0) break;
        later_.append(buffer, static_cast<size_t>(count));
      }
    });
  }
  ~FakeServer() {
    if (thread_.joinable()) thread_.join();
    ::close(connection_);
    ::close(listener_);
  }
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  uint16_t port() const { return port_; }

  // What the client sent after the reply, once it has closed.
  std::string BytesAfterReply() {
    thread_.join();
    return later_;
  }

 private:
  int listener_;
  int connection_ = -1;
  uint16_t port_ = 0;
  std::string later_;
  std::thread thread_;
};

// Something that took the store's port without the run's token, challenging
// like a store: the client finds its proof wrong and leaves without proving
// its own token.
TEST(TcpStoreProtocolTest, ClientWithATokenRefusesAServerThatCannotProveIt) {
  FakeServer impostor(FrameWriter(MessageType::kChallenge)
                          .Str(std::string(wire::kNonceBytes, '\x11'))
                          .Str(std::string(wire::kProofBytes, '\x22'))
                          .Finish());
  try {
    TcpStoreClient::Connect("127.0.0.1", impostor.port(), milliseconds(2000), "the-run-token");
    ADD_FAILURE() << "trusted a server that cannot prove the token";
  } catch (const StoreError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("127.0.0.1:" + std::to_string(impostor.port()) +
                           " does not hold this client's run token"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("INFINI_RUN_TOKEN"), std::string::npos) << message;
  }
  EXPECT_EQ(impostor.BytesAfterReply(), "") << "the client answered an impostor's challenge";
}

TEST(TcpStoreProtocolTest, ClientRefusesAServerThatIsNotAStore) {
  FakeServer impostor("HTTP/1.1 400 Bad Request\r\n\r\n");
  try {
    TcpStoreClient::Connect("127.0.0.1", impostor.port(), milliseconds(2000));
    ADD_FAILURE() << "connected to an impostor";
  } catch (const StoreError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("127.0.0.1:" + std::to_string(impostor.port())), std::string::npos)
        << message;
  }
}

TEST(TcpStoreProtocolTest, ClientGivesUpOnAServerThatStopsAnswering) {
  FakeServer silent(FrameWriter(MessageType::kHelloOk)
                        .U32(wire::kMagic)
                        .U32(wire::kVersion)
                        .U64(1024)
                        .U32(16)
                        .Finish());
  auto client = TcpStoreClient::Connect("127.0.0.1", silent.port(), milliseconds(2000));
  client->set_timeout(milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  try {
    client->Set("k", "v");
    ADD_FAILURE() << "Set returned";
  } catch (const StoreError& error) {
    EXPECT_NE(std::string(error.what()).find("did not answer in time"), std::string::npos)
        << error.what();
  }
  EXPECT_LT(testing::ElapsedSince(start), milliseconds(1500));
}

}  // namespace
}  // namespace infini::rendezvous
