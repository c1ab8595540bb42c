// TCP implementation of Store (model: c10d's TCPStore). One server, many
// clients; the server runs a libuv event loop on one background thread, so
// thousands of clients cost one thread and a small buffer each.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "infini/rendezvous/store.h"

namespace infini::rendezvous {

// Where a relay forwards (TcpStoreServerOptions::upstream): the run's TCP
// store, of protocol version 4 (batches).
struct RelayUpstream {
  std::string host;
  uint16_t port = 0;
  std::string token;  // the run's token, proved to the upstream
  // How long the first connection retries (the upstream may start later);
  // past it the requests that wait for the connection fail. After a
  // connection was lost, the next is tried once, as TcpStoreClient does: the
  // upstream was there, so a refusal means it is gone, and whoever waits on
  // the relay (a launcher's heartbeat) learns it as soon as its own
  // connection would have told it.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  // The longest upstream watch (one upstream Get of a key that clients wait
  // on): a watch lasts as long as the longest waiter on its key when it is
  // made, at most this, and is made again while anyone still waits. It
  // bounds how long node 0 holds a waiter for this relay after its own
  // waiters went.
  std::chrono::milliseconds longest_watch{std::chrono::seconds(30)};
  // Upstream requests of at most this many bytes (watches, heartbeats,
  // counters) leave ahead of larger ones queued before them.
  size_t small_request_bytes = size_t{64} << 10;
  // Larger requests share one upstream frame up to this many bytes (one
  // larger travels alone): what a small request may wait behind.
  size_t large_bytes_per_frame = size_t{4} << 20;
};

struct TcpStoreServerOptions {
  // Address to bind, exactly: "127.0.0.1" (the default) serves only this
  // host; "0.0.0.0" or "::" every interface; a name is resolved once.
  std::string host = "127.0.0.1";
  // 0 picks a free port; port() tells which.
  uint16_t port = 0;
  // The run's secret (run_token.h). Empty: no authentication (tests, and
  // torchrun-style runs without a secret). Otherwise every client must prove
  // it in the hello, and one that cannot is refused and closed at once.
  std::string token;

  // Caps against clients that are broken or hostile (docs/rendezvous.md).
  // A request larger than this (key and values together, plus a few bytes of
  // framing) is refused: the client gets an error and its connection is closed.
  size_t max_message_bytes = size_t{64} << 20;
  // Keys in one Check or Wait; more is refused like an oversized request.
  size_t max_keys_per_request = size_t{1} << 16;
  // Bytes a connection may send before its hello is accepted.
  size_t max_unauthenticated_bytes = size_t{4} << 10;
  // The budget of requests in flight, charged with what they will need: a
  // request larger than 4 KiB with its whole size once its header arrives
  // (it is read only once the budget holds all of it, first come first
  // admitted, so every admitted request completes), the bookkeeping of
  // waiting Gets and Waits (which may take all but one largest message of
  // it; beyond, a Get or Wait is refused with an error naming this), and
  // unsent replies less the values they share with the store. It must hold
  // two of the largest messages.
  size_t max_buffered_bytes = size_t{256} << 20;
  // Keys and values held: every key with a small overhead, and every value
  // still alive (also one that an unsent reply keeps after it was replaced).
  // A Set, Add or CompareSet beyond it is refused with an error naming this;
  // the connection stays usable. At least max_message_bytes.
  size_t max_stored_bytes = size_t{1} << 30;
  // Replies (their values included, although shared with the table) queued
  // for one connection above which it is neither read nor served until its
  // client reads (64 KiB while the budget is spent): a client that does not
  // read its replies holds up only itself.
  size_t max_unsent_bytes_per_connection = size_t{4} << 20;
  // Connections that have not completed their hello, unless their hello
  // carries the run token's ticket (our clients' do): at most this many in
  // all and from one peer address. A new one beyond either cap closes the
  // oldest such connection (of that address, or of all); so does one that
  // finds the process's descriptors near its open-file limit. Holders of the
  // token are never closed to make room.
  size_t max_unauthenticated_connections = 1024;
  size_t max_unauthenticated_per_peer = 64;
  // A connection that has not completed its hello within this is closed.
  std::chrono::milliseconds hello_timeout{std::chrono::seconds(10)};
  // An admitted request of which no byte arrived for this long before it
  // was whole is refused and its connection closed (it held budget).
  std::chrono::milliseconds stalled_request_timeout{std::chrono::seconds(30)};
  // A connection with no waiting request on which no byte moved (in or out)
  // for this long is closed; 0 keeps idle connections open. Clients reconnect
  // on their next call (TcpStoreClient).
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};

  // A relay (docs/rendezvous.md, "Relay"): when set, this server answers only
  // node-local keys (node_local_key.h) itself and forwards every other
  // request to the TCP store there, on one connection, in batches; a key
  // that its clients wait on is watched upstream once, however many wait.
  // When the upstream cannot be reached, the clients' requests get an error.
  std::optional<RelayUpstream> upstream;
  // A relay's every upstream request, for tests and measurements: its name
  // ("set", "add", "compare_set", "delete", "check", "num_keys", "watch") and
  // its first key. Called on the relay's upstream thread as the request is
  // put in a batch, never once the server is destroyed.
  std::function<void(const std::string& request, const std::string& key)> on_upstream_request;
};

// What a relay sent upstream, for tests and measurements.
struct RelayCounts {
  size_t requests = 0;     // every upstream request
  size_t writes = 0;       // Set, Add, CompareSet, Delete
  size_t watches = 0;      // upstream Gets of keys that clients wait on
  size_t messages = 0;     // batches sent (each one frame, one or more requests)
  size_t bytes = 0;        // bytes sent and received upstream, frames whole
  size_t connections = 0;  // upstream connections made (one at a time)
  size_t queued = 0;       // now: requests waiting to be sent (behind a batch in flight)
};

class TcpStoreServer {
 public:
  // Binds, listens and starts serving on a background thread. Throws
  // StoreError naming host:port when binding fails (e.g. port in use), and
  // std::invalid_argument naming the option when the caps contradict.
  static std::unique_ptr<TcpStoreServer> Start(const TcpStoreServerOptions& options = {});

  virtual ~TcpStoreServer() = default;  // stops serving and closes every connection
  virtual uint16_t port() const = 0;
  // Number of keys currently stored (for tests and measurements).
  virtual size_t num_keys() const = 0;
  // Number of Get/Wait requests now blocked on missing keys, and of open
  // client connections (for tests and measurements).
  virtual size_t num_waiters() const = 0;
  virtual size_t num_connections() const = 0;
  // Connections refused during their hello (bad hello, wrong or missing run
  // token, too much input before the hello), for tests and measurements.
  virtual size_t num_refused_hellos() const = 0;
  // Bytes now held for connections: received and unhandled, or unsent.
  virtual size_t buffered_bytes() const = 0;
  // Bytes charged to max_buffered_bytes (admitted requests whole, waiters'
  // bookkeeping, unsent replies less shared values), and bytes of keys and
  // values held (max_stored_bytes), for tests and measurements.
  virtual size_t charged_bytes() const = 0;
  virtual size_t stored_bytes() const = 0;
  // Connections closed before their hello completed to make room (the caps
  // on unauthenticated connections, descriptors near the limit).
  virtual size_t num_shed_connections() const = 0;
  // What went upstream (zeros unless the server is a relay).
  virtual RelayCounts relay_counts() const = 0;
};

// What a client that still cannot reach its store is told while Connect
// retries (TcpStoreClient::Connect's `progress`).
struct ConnectWait {
  std::string endpoint;                         // "host:port", as in Connect's errors
  std::chrono::system_clock::time_point since;  // the first attempt
  std::chrono::milliseconds waited{0};          // since then
  std::chrono::milliseconds left{0};            // until Connect gives up
  std::string last_failure;                     // why the last attempt failed
};

// The library says nothing by itself: a caller that wants a waiting process
// to talk (parallel/'s StoreWaitReporter prints to stderr) hands Connect a
// `report`. It is called on the connecting thread once `first` has passed
// without a connection, then every `every`, while Connect still retries
// (never after it gave up or connected). While reporting, one connection
// attempt lasts until the next report at most (at least 1 s), so a host
// that drops the packets cannot keep the reporter silent.
struct ConnectProgress {
  std::function<void(const ConnectWait&)> report;  // empty: silent
  std::chrono::milliseconds first{std::chrono::seconds(5)};
  std::chrono::milliseconds every{std::chrono::seconds(30)};
};

class TcpStoreClient : public Store {
 public:
  // Connects to host:port, retrying until `connect_timeout` passes (the server
  // may start after its clients). With a `token`, the server must prove it
  // first and this client then proves it; without one, only a server without
  // a token serves it. Throws StoreError naming host:port; a failed hello
  // (token refused, a server that cannot prove it or asks for none, not our
  // store) is a StoreHandshakeError, at once and with a message that names
  // INFINI_RUN_TOKEN where it matters. `progress` is told while it waits.
  static std::unique_ptr<TcpStoreClient> Connect(
      const std::string& host, uint16_t port,
      std::chrono::milliseconds connect_timeout = kDefaultTimeout, const std::string& token = {},
      const ConnectProgress& progress = {});
  // Safe to call from several threads; calls are serialized on the one
  // connection, so threads that wait concurrently should each have a client.
  //
  // Get and Wait time out on the server (the connection stays usable); every
  // call also fails with StoreError, naming host:port, when the server is gone
  // or the connection broke (after which every call fails). A connection that
  // the server closed while it was idle (idle_timeout) is found closed before
  // the next request is sent, and is made again, hello included.

  // Number of keys in the store.
  virtual int64_t NumKeys() = 0;
};

}  // namespace infini::rendezvous
