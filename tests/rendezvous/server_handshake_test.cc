// The server's side of the hello on its own, without sockets: frames made by
// hand go in, and each step says what the server sends or why it refuses.
#include "server_handshake.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "hello_auth.h"
#include "wire_protocol.h"

namespace infini::rendezvous {
namespace {

using wire::BodyReader;
using wire::FrameWriter;
using wire::MessageType;

constexpr char kToken[] = "server-handshake-test-token";

// A frame's body: what the connection layer hands to the handshake.
std::string Body(FrameWriter frame) { return frame.Finish().substr(wire::kFrameHeaderBytes); }

std::string Hello(const std::string& client_nonce, uint32_t version = wire::kVersion) {
  return Body(
      std::move(FrameWriter(MessageType::kHello).U32(wire::kMagic).U32(version).Str(client_nonce)));
}

std::string Proof(const std::string& mac) {
  return Body(std::move(FrameWriter(MessageType::kProof).Str(mac)));
}

HelloTerms Terms(std::string token) {
  return {.token = std::move(token), .max_message_bytes = 12345, .max_keys_per_request = 7};
}

// The limits that a kHelloOk frame tells the client.
struct HelloOk {
  uint64_t max_message_bytes = 0;
  uint32_t max_keys = 0;
};
HelloOk ReadHelloOk(const std::string& frame) {
  BodyReader reader(std::string_view(frame).substr(wire::kFrameHeaderBytes));
  uint8_t type = 0;
  uint32_t magic = 0;
  uint32_t version = 0;
  HelloOk limits;
  EXPECT_TRUE(reader.U8(&type) && reader.U32(&magic) && reader.U32(&version) &&
              reader.U64(&limits.max_message_bytes) && reader.U32(&limits.max_keys) &&
              reader.AtEnd());
  EXPECT_EQ(static_cast<MessageType>(type), MessageType::kHelloOk);
  EXPECT_EQ(magic, wire::kMagic);
  EXPECT_EQ(version, wire::kVersion);
  return limits;
}

TEST(ServerHandshakeTest, WithoutATokenAHelloOfThisVersionIsAcceptedWithTheServersLimits) {
  ServerHandshake handshake;
  const ServerHandshake::Step step =
      handshake.Next(Hello(std::string(wire::kNonceBytes, 'n')), Terms(""));
  EXPECT_EQ(step.refusal, "");
  EXPECT_TRUE(handshake.ready());
  const HelloOk limits = ReadHelloOk(step.reply);
  EXPECT_EQ(limits.max_message_bytes, 12345u);
  EXPECT_EQ(limits.max_keys, 7u);
}

TEST(ServerHandshakeTest, AKeyLimitBeyond32BitsIsToldAsTheLargest32BitCount) {
  ServerHandshake handshake;
  HelloTerms terms = Terms("");
  terms.max_keys_per_request = std::numeric_limits<size_t>::max();
  const ServerHandshake::Step step =
      handshake.Next(Hello(std::string(wire::kNonceBytes, 'n')), terms);
  EXPECT_EQ(ReadHelloOk(step.reply).max_keys, std::numeric_limits<uint32_t>::max());
}

TEST(ServerHandshakeTest, AnotherVersionOrNotAHelloIsRefusedSayingWhy) {
  // One version: an older one (3 and 4 were served side by side once) is
  // refused like a newer one.
  for (const uint32_t version : {wire::kVersion + 1, 3u, 4u}) {
    ServerHandshake other_version;
    EXPECT_EQ(other_version.Next(Hello("", version), Terms(kToken)).refusal,
              "store protocol version " + std::to_string(version) +
                  " is not supported; this server speaks version " +
                  std::to_string(wire::kVersion) +
                  " only (the client and the store come from different builds)");
    EXPECT_FALSE(other_version.ready());
  }

  ServerHandshake not_a_hello;
  EXPECT_EQ(not_a_hello.Next(Body(FrameWriter(MessageType::kNumKeys)), Terms("")).refusal,
            "not an InfiniCCL store client (bad hello)");

  ServerHandshake short_nonce;
  EXPECT_NE(short_nonce.Next(Hello("short"), Terms("")).refusal.find("malformed hello"),
            std::string::npos);
}

TEST(ServerHandshakeTest, WithATokenTheServerProvesItThenAcceptsTheClientsProof) {
  ServerHandshake handshake;
  const std::string client_nonce = auth::NonceWithTicket(kToken);
  const ServerHandshake::Step challenge = handshake.Next(Hello(client_nonce), Terms(kToken));
  ASSERT_EQ(challenge.refusal, "");
  EXPECT_EQ(handshake.state(), ServerHandshake::State::kAwaitProof);
  BodyReader reader(std::string_view(challenge.reply).substr(wire::kFrameHeaderBytes));
  uint8_t type = 0;
  std::string server_nonce;
  std::string server_proof;
  ASSERT_TRUE(reader.U8(&type) && reader.Str(&server_nonce) && reader.Str(&server_proof) &&
              reader.AtEnd());
  EXPECT_EQ(static_cast<MessageType>(type), MessageType::kChallenge);
  EXPECT_EQ(server_nonce.size(), wire::kNonceBytes);
  EXPECT_TRUE(
      auth::ProofMatches(auth::Side::kServer, kToken, client_nonce, server_nonce, server_proof));

  const ServerHandshake::Step accepted =
      handshake.Next(Proof(auth::ProofFor(auth::Side::kClient, kToken, client_nonce, server_nonce)),
                     Terms(kToken));
  EXPECT_EQ(accepted.refusal, "");
  EXPECT_TRUE(handshake.ready());
  EXPECT_EQ(ReadHelloOk(accepted.reply).max_message_bytes, 12345u);
}

TEST(ServerHandshakeTest, AWrongOrMalformedProofIsRefusedAndTheHelloStaysUnaccepted) {
  ServerHandshake wrong;
  const std::string client_nonce(wire::kNonceBytes, 'c');
  ASSERT_EQ(wrong.Next(Hello(client_nonce), Terms(kToken)).refusal, "");
  EXPECT_EQ(wrong.Next(Proof(std::string(wire::kProofBytes, 'p')), Terms(kToken)).refusal,
            "the proof does not match this run's token");
  EXPECT_EQ(wrong.state(), ServerHandshake::State::kAwaitProof);

  ServerHandshake malformed;
  ASSERT_EQ(malformed.Next(Hello(client_nonce), Terms(kToken)).refusal, "");
  EXPECT_EQ(malformed.Next(Proof("short"), Terms(kToken)).refusal,
            "malformed proof of the run token");
  EXPECT_FALSE(malformed.ready());
}

TEST(ServerHandshakeTest, OnlyANonceWithATicketForThisTokenMarksAHolder) {
  ServerHandshake holder;
  EXPECT_TRUE(holder.Next(Hello(auth::NonceWithTicket(kToken)), Terms(kToken)).holds_ticket);
  ServerHandshake other_token;
  EXPECT_FALSE(
      other_token.Next(Hello(auth::NonceWithTicket("another-token")), Terms(kToken)).holds_ticket);
  ServerHandshake random;
  EXPECT_FALSE(
      random.Next(Hello(auth::RandomBytes(wire::kNonceBytes)), Terms(kToken)).holds_ticket);
}

}  // namespace
}  // namespace infini::rendezvous
