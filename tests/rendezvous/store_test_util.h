// Helpers shared by the store tests: a local server, clients, and a stopwatch.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "infini/rendezvous/tcp_store.h"

// Sanitized builds (CI runs the store tests under ASan and TSan): their
// memory figures include shadow memory and quarantine, so tests that bound
// a process's RSS skip that bound there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define INFINI_STORE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define INFINI_STORE_TEST_SANITIZED 1
#endif
#endif

namespace infini::rendezvous::testing {

using std::chrono::milliseconds;

inline std::unique_ptr<TcpStoreServer> StartLocalServer(size_t max_message_bytes = size_t{64}
                                                                                   << 20) {
  TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  options.max_message_bytes = max_message_bytes;
  return TcpStoreServer::Start(options);
}

// A relay (TcpStoreServerOptions::upstream) of the store at
// 127.0.0.1:`upstream_port`, without a token.
inline std::unique_ptr<TcpStoreServer> StartRelayOf(
    uint16_t upstream_port, std::chrono::milliseconds connect_timeout = std::chrono::seconds(2)) {
  TcpStoreServerOptions options;
  options.upstream = RelayUpstream{
      .host = "127.0.0.1", .port = upstream_port, .token = "", .connect_timeout = connect_timeout};
  return TcpStoreServer::Start(options);
}

inline std::unique_ptr<TcpStoreClient> ConnectTo(const TcpStoreServer& server,
                                                 milliseconds timeout = milliseconds(5000)) {
  auto client = TcpStoreClient::Connect("127.0.0.1", server.port(), timeout);
  client->set_timeout(timeout);
  return client;
}

inline milliseconds ElapsedSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
}

// Polls `condition` until it holds or `timeout` passes; returns whether it held.
inline bool Eventually(const std::function<bool()>& condition,
                       milliseconds timeout = milliseconds(2000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

}  // namespace infini::rendezvous::testing
