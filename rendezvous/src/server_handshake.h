// The server's side of the hello, without sockets: the version check, the
// run token's challenge and the client's proof (hello_auth), one frame at a
// time, so that tests drive it with frames made by hand. Each connection has
// one; the connection layer sends what a step answers and refuses the
// connection when a step says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "wire_protocol.h"

namespace infini::rendezvous {

// What every hello of one server is checked against and told.
struct HelloTerms {
  std::string token;  // "": no challenge, a hello of our version is accepted
  uint64_t max_message_bytes = 0;
  size_t max_keys_per_request = 0;
};

class ServerHandshake {
 public:
  enum class State { kAwaitHello, kAwaitProof, kReady };

  // What the server does after one frame of the hello.
  struct Step {
    // Not empty: refuse the connection with this text (and send nothing else).
    std::string refusal;
    // Otherwise the frame to send: the challenge, or kHelloOk once accepted.
    std::string reply;
    // The hello's nonce carries a ticket for the token: a holder of the
    // token, never closed to make room for strangers.
    bool holds_ticket = false;
  };

  // Takes the next frame body of the hello (a kHello, then with a token a
  // kProof).
  Step Next(std::string_view body, const HelloTerms& terms);

  State state() const { return state_; }
  bool ready() const { return state_ == State::kReady; }
  // The version this connection speaks (the client's, at most the server's),
  // once the hello was read.
  uint32_t version() const { return version_; }

 private:
  Step Accept(const HelloTerms& terms);

  State state_ = State::kAwaitHello;
  uint32_t version_ = 0;
  // Both sides' challenges, while state_ == kAwaitProof.
  std::string client_nonce_;
  std::string server_nonce_;
};

}  // namespace infini::rendezvous
