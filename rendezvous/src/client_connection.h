// The store client's transport, apart from its requests: deadlines on a
// steady clock, one blocking TCP connection whose every wait is a poll()
// with a deadline, and connecting to any address of host:port.
#pragma once

#include <netdb.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace infini::rendezvous::store_client {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Timeouts are clamped to this so that deadline arithmetic cannot overflow.
inline constexpr milliseconds kLongestTimeout{std::chrono::hours(24 * 365)};

inline milliseconds Clamp(milliseconds timeout) {
  return std::clamp(timeout, milliseconds(0), kLongestTimeout);
}

inline Clock::time_point DeadlineAfter(milliseconds timeout) {
  return Clock::now() + Clamp(timeout);
}

// A failed transfer: what happened, without the endpoint.
struct IoFailure {
  std::string what;
};

// One connected socket, in blocking mode, gated by poll(): every call ends
// by its deadline. Transfers throw IoFailure.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  void SendAll(std::string_view bytes, Clock::time_point deadline);
  void ReceiveExactly(char* bytes, size_t length, Clock::time_point deadline,
                      const std::string& late_message);
  // Whether the server closed the connection (or reset it) while no request
  // was in flight; any byte it sent unasked also makes the connection unusable.
  bool ClosedByPeer();
  // Returns one reply body; a body longer than `max_body_bytes` is taken as a
  // corrupt stream.
  std::string ReceiveFrame(Clock::time_point deadline, const std::string& late_message,
                           size_t max_body_bytes);
  // For a caller that polls the socket itself (MSG_DONTWAIT transfers).
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Connects once to any address of host:port within the deadline; returns the
// fd (non-blocking) or -1 with a reason in `failure`.
int TryConnect(const std::string& host, uint16_t port, Clock::time_point deadline,
               std::string* failure);

// A connection past its hello, for a client that drives
// the socket itself (the relay's upstream, upstream_relay.cc), and what the
// server's hello told it.
struct GreetedConnection {
  std::unique_ptr<Connection> connection;
  size_t max_message_bytes = 0;
  size_t max_keys_per_request = 0;
};
// Connects and greets as TcpStoreClient::Connect does (retries, the token),
// defined in tcp_store_client.cc. Throws StoreError.
GreetedConnection ConnectGreeted(const std::string& host, uint16_t port,
                                 milliseconds connect_timeout, const std::string& token,
                                 bool retry = true);

}  // namespace infini::rendezvous::store_client
