#include "server_handshake.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "hello_auth.h"
#include "infini/rendezvous/store.h"
#include "request_codec.h"
#include "wire_protocol.h"

namespace infini::rendezvous {

using wire::FrameWriter;
using wire::MessageType;

namespace {

// GCC 12 warns on designated initializers that leave fields to their
// defaults; these name the two kinds of step instead.
ServerHandshake::Step Refusal(std::string text) {
  ServerHandshake::Step step;
  step.refusal = std::move(text);
  return step;
}

ServerHandshake::Step Reply(std::string frame) {
  ServerHandshake::Step step;
  step.reply = std::move(frame);
  return step;
}

}  // namespace

ServerHandshake::Step ServerHandshake::Next(std::string_view body, const HelloTerms& terms) {
  if (state_ == State::kAwaitProof) {
    std::string proof;
    const std::string error = wire::DecodeProof(body, &proof);
    if (!error.empty() || !auth::ProofMatches(auth::Side::kClient, terms.token, client_nonce_,
                                              server_nonce_, proof)) {
      return Refusal(error.empty() ? "the proof does not match this run's token" : error);
    }
    return Accept(terms);
  }
  uint32_t version = 0;
  std::string client_nonce;
  if (std::string error = wire::DecodeHello(body, &version, &client_nonce); !error.empty()) {
    return Refusal(std::move(error));
  }
  if (version != wire::kVersion) {
    return Refusal("store protocol version " + std::to_string(version) +
                   " is not supported; this server speaks version " +
                   std::to_string(wire::kVersion) +
                   " only (the client and the store come from different builds)");
  }
  version_ = version;
  if (terms.token.empty()) return Accept(terms);
  Step step;
  std::string server_proof;
  try {
    step.holds_ticket = auth::NonceCarriesTicket(terms.token, client_nonce);
    server_nonce_ = auth::RandomBytes(wire::kNonceBytes);
    server_proof = auth::ProofFor(auth::Side::kServer, terms.token, client_nonce, server_nonce_);
  } catch (const StoreError& error) {
    step.refusal = std::string("the store cannot make a challenge: ") + error.what();
    return step;
  }
  client_nonce_ = std::move(client_nonce);
  state_ = State::kAwaitProof;
  step.reply = FrameWriter(MessageType::kChallenge).Str(server_nonce_).Str(server_proof).Finish();
  return step;
}

ServerHandshake::Step ServerHandshake::Accept(const HelloTerms& terms) {
  state_ = State::kReady;
  client_nonce_.clear();
  server_nonce_.clear();
  return Reply(
      FrameWriter(MessageType::kHelloOk)
          .U32(wire::kMagic)
          .U32(version_)
          .U64(terms.max_message_bytes)
          .U32(static_cast<uint32_t>(std::min<size_t>(terms.max_keys_per_request, UINT32_MAX)))
          .Finish());
}

}  // namespace infini::rendezvous
