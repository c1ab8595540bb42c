// TCP implementation of Store (model: c10d's TCPStore). One server, many
// clients; the server runs a libuv event loop on one background thread, so
// thousands of clients cost one thread and a small buffer each.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "infini/rendezvous/store.h"

namespace infini::rendezvous {

struct TcpStoreServerOptions {
  // Address to bind; "0.0.0.0" accepts every interface, "127.0.0.1" only local
  // clients.
  std::string host = "0.0.0.0";
  // 0 picks a free port; port() tells which.
  uint16_t port = 0;
  // A request larger than this (key and values together, plus a few bytes of
  // framing) is refused: the client gets an error and its connection is closed.
  size_t max_message_bytes = size_t{64} << 20;
  // The run's secret; empty: no authentication. (Stub until the store branch
  // lands: not yet checked.)
  std::string token;
};

class TcpStoreServer {
 public:
  // Binds, listens and starts serving on a background thread. Throws
  // StoreError naming host:port when binding fails (e.g. port in use).
  static std::unique_ptr<TcpStoreServer> Start(const TcpStoreServerOptions& options = {});

  virtual ~TcpStoreServer() = default;  // stops serving and closes every connection
  virtual uint16_t port() const = 0;
  // Number of keys currently stored (for tests and measurements).
  virtual size_t num_keys() const = 0;
  // Number of Get/Wait requests now blocked on missing keys, and of open
  // client connections (for tests and measurements).
  virtual size_t num_waiters() const = 0;
  virtual size_t num_connections() const = 0;
};

class TcpStoreClient : public Store {
 public:
  // Connects to host:port, retrying until `connect_timeout` passes (the server
  // may start after its clients). Throws StoreError naming host:port.
  static std::unique_ptr<TcpStoreClient> Connect(
      const std::string& host, uint16_t port,
      std::chrono::milliseconds connect_timeout = kDefaultTimeout, const std::string& token = {});
  // Safe to call from several threads; calls are serialized on the one
  // connection, so threads that wait concurrently should each have a client.
  //
  // Get and Wait time out on the server (the connection stays usable); every
  // call also fails with StoreError, naming host:port, when the server is gone
  // or the connection broke (after which every call fails: no reconnect).

  // Number of keys in the store.
  virtual int64_t NumKeys() = 0;
};

}  // namespace infini::rendezvous
