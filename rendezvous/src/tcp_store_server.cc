// The store server: one libuv loop on one thread serves every connection.
//
// State lives on the loop thread only (data_, waiters, connections); other
// threads see atomic counters. A Get or Wait on missing keys parks a Waiter in
// the per-key list of each missing key, so a Set wakes exactly the waiters of
// its key (N waiters cost O(N) in total). Each waiter has its own timer, and is
// removed from every list when it completes, times out or its client leaves,
// so nothing of a finished request stays behind.
//
// A connection processes one request at a time: while its request waits, its
// later bytes stay buffered (reading pauses once a whole message is buffered),
// which keeps replies in request order and memory per connection bounded.

#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <list>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "infini/rendezvous/endpoint.h"
#include "infini/rendezvous/tcp_store.h"
#include "wire_protocol.h"

namespace infini::rendezvous {
namespace {

using wire::BodyReader;
using wire::FrameWriter;
using wire::MessageType;

// Replies queued but not yet taken by the kernel; above this a connection stops
// reading requests until its client catches up.
constexpr size_t kMaxQueuedReplyBytes = size_t{4} << 20;
constexpr size_t kReadChunkBytes = size_t{64} << 10;

class TcpStoreServerImpl;

struct Waiter;

struct Connection {
  uv_tcp_t handle;
  TcpStoreServerImpl* server = nullptr;
  std::string input;        // received bytes not yet processed
  size_t input_offset = 0;  // start of the first unprocessed frame in `input`
  bool greeted = false;     // a valid hello was received
  bool reading = false;
  bool closing = false;      // uv_close was called; freed in its callback
  bool refusing = false;     // an error reply is being flushed before closing
  Waiter* waiter = nullptr;  // the request now blocked, if any
};

struct Waiter {
  uv_timer_t timer;
  Connection* connection = nullptr;
  bool is_get = false;  // Get replies with the value, Wait with kOk
  std::string get_key;
  size_t missing_keys = 0;
  // Where this waiter sits in waiters_by_key_, one entry per missing key.
  std::vector<std::pair<std::string, std::list<Waiter*>::iterator>> registrations;
};

struct WriteRequest {
  uv_write_t request;
  std::string frame;
};

struct ShutdownRequest {
  uv_shutdown_t request;
};

std::string UvError(int code) { return uv_strerror(code); }

class TcpStoreServerImpl final : public TcpStoreServer {
 public:
  explicit TcpStoreServerImpl(const TcpStoreServerOptions& options) : options_(options) {
    read_chunk_.resize(kReadChunkBytes);
  }

  ~TcpStoreServerImpl() override {
    if (thread_.joinable()) {
      uv_async_send(&stop_async_);
      thread_.join();
    }
    if (loop_initialized_) {
      // Every handle is closed by OnStop (or by the failed Start); run the
      // close callbacks that are still due.
      uv_run(&loop_, UV_RUN_DEFAULT);
      const int result = uv_loop_close(&loop_);
      if (result != 0)
        std::fprintf(stderr, "store server: loop not closed: %s\n", uv_strerror(result));
    }
  }

  // Binds and listens; throws StoreError naming host:port on failure.
  void Listen() {
    const std::string where = FormatEndpoint({options_.host, options_.port});
    CheckUv(uv_loop_init(&loop_), where, "could not create its event loop");
    loop_initialized_ = true;
    CheckUv(uv_tcp_init(&loop_, &listener_), where, "could not create its socket");
    listener_.data = this;
    listener_open_ = true;

    sockaddr_storage address{};
    ResolveBindAddress(where, &address);
    CheckUv(uv_tcp_bind(&listener_, reinterpret_cast<const sockaddr*>(&address), 0), where,
            "could not bind");
    // libuv sets SO_REUSEADDR on bind, so a restarted launcher rebinds at once.
    CheckUv(uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), SOMAXCONN, OnConnection), where,
            "could not listen");

    sockaddr_storage bound{};
    int bound_length = sizeof(bound);
    CheckUv(uv_tcp_getsockname(&listener_, reinterpret_cast<sockaddr*>(&bound), &bound_length),
            where, "could not read its port");
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    CheckUv(uv_async_init(&loop_, &stop_async_, OnStop), where, "could not create its wake-up");
    stop_async_.data = this;
  }

  void StartThread() {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "infini_store");
      uv_run(&loop_, UV_RUN_DEFAULT);
    });
  }

  uint16_t port() const override { return port_; }
  size_t num_keys() const override { return num_keys_.load(std::memory_order_relaxed); }
  size_t num_waiters() const override { return num_waiters_.load(std::memory_order_relaxed); }
  size_t num_connections() const override {
    return num_connections_.load(std::memory_order_relaxed);
  }

 private:
  // ---- set-up ----

  void CheckUv(int result, const std::string& where, const char* what) {
    if (result == 0) return;
    CloseListenerAfterFailedStart();
    throw StoreError("store server on " + where + " " + what + ": " + UvError(result));
  }

  void CloseListenerAfterFailedStart() {
    if (listener_open_) {
      uv_close(reinterpret_cast<uv_handle_t*>(&listener_), nullptr);
      listener_open_ = false;
    }
  }

  void ResolveBindAddress(const std::string& where, sockaddr_storage* address) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* results = nullptr;
    const std::string port_text = std::to_string(options_.port);
    const int result = getaddrinfo(options_.host.empty() ? nullptr : options_.host.c_str(),
                                   port_text.c_str(), &hints, &results);
    if (result != 0) {
      CloseListenerAfterFailedStart();
      throw StoreError("store server on " + where + " could not resolve host '" + options_.host +
                       "': " + gai_strerror(result));
    }
    std::memcpy(address, results->ai_addr, results->ai_addrlen);
    freeaddrinfo(results);
  }

  // ---- connections ----

  static void OnConnection(uv_stream_t* listener, int status) {
    auto* self = static_cast<TcpStoreServerImpl*>(listener->data);
    if (status < 0 || self->stopping_) return;
    auto* connection = new Connection;
    connection->server = self;
    connection->handle.data = connection;
    if (uv_tcp_init(&self->loop_, &connection->handle) != 0) {
      delete connection;
      return;
    }
    self->connections_.insert(connection);
    self->num_connections_.fetch_add(1, std::memory_order_relaxed);
    if (uv_accept(listener, Stream(connection)) != 0) {
      self->Close(connection);
      return;
    }
    uv_tcp_nodelay(&connection->handle, 1);
    self->UpdateReading(connection);
  }

  static uv_stream_t* Stream(Connection* connection) {
    return reinterpret_cast<uv_stream_t*>(&connection->handle);
  }

  static void OnAllocate(uv_handle_t* handle, size_t /*suggested*/, uv_buf_t* buffer) {
    // One buffer for every connection: the loop is single-threaded and OnRead
    // copies what it got before the next read.
    auto* self = static_cast<Connection*>(handle->data)->server;
    *buffer =
        uv_buf_init(self->read_chunk_.data(), static_cast<unsigned>(self->read_chunk_.size()));
  }

  static void OnRead(uv_stream_t* stream, ssize_t bytes_read, const uv_buf_t* buffer) {
    auto* connection = static_cast<Connection*>(stream->data);
    TcpStoreServerImpl* self = connection->server;
    if (bytes_read < 0) {  // EOF or a broken connection
      self->Close(connection);
      return;
    }
    if (bytes_read == 0 || connection->refusing) return;
    connection->input.append(buffer->base, static_cast<size_t>(bytes_read));
    self->Process(connection);
  }

  bool IsPaused(Connection* connection) const {
    return connection->closing || connection->refusing || connection->waiter != nullptr ||
           uv_stream_get_write_queue_size(Stream(connection)) > kMaxQueuedReplyBytes;
  }

  // Handles every complete request buffered on `connection`, in order, until
  // one has to wait.
  void Process(Connection* connection) {
    while (!IsPaused(connection)) {
      const size_t buffered = connection->input.size() - connection->input_offset;
      if (buffered < wire::kFrameHeaderBytes) break;
      const uint32_t body_bytes =
          wire::DecodeU32(connection->input.data() + connection->input_offset);
      if (body_bytes == 0 || body_bytes > options_.max_message_bytes) {
        Refuse(connection, "message of " + std::to_string(body_bytes) +
                               " bytes refused: the store's max_message_bytes is " +
                               std::to_string(options_.max_message_bytes));
        return;
      }
      if (buffered < wire::kFrameHeaderBytes + body_bytes) break;
      const std::string_view body(
          connection->input.data() + connection->input_offset + wire::kFrameHeaderBytes,
          body_bytes);
      connection->input_offset += wire::kFrameHeaderBytes + body_bytes;
      Handle(connection, body);
    }
    if (connection->input_offset == connection->input.size()) {
      connection->input.clear();
      connection->input_offset = 0;
    } else if (connection->input_offset >= kReadChunkBytes) {
      connection->input.erase(0, connection->input_offset);
      connection->input_offset = 0;
    }
    UpdateReading(connection);
  }

  // Reads unless the connection holds a whole unprocessed message already; it
  // keeps reading while a request waits so that a vanished client is noticed.
  void UpdateReading(Connection* connection) {
    if (connection->closing || connection->refusing) return;
    const size_t buffered = connection->input.size() - connection->input_offset;
    const bool want = buffered <= options_.max_message_bytes + wire::kFrameHeaderBytes;
    if (want == connection->reading) return;
    if (want) {
      if (uv_read_start(Stream(connection), OnAllocate, OnRead) != 0) {
        Close(connection);
        return;
      }
    } else {
      uv_read_stop(Stream(connection));
    }
    connection->reading = want;
  }

  void Send(Connection* connection, std::string frame) {
    if (connection->closing) return;
    auto* write = new WriteRequest;
    write->frame = std::move(frame);
    uv_buf_t buffer = uv_buf_init(write->frame.data(), static_cast<unsigned>(write->frame.size()));
    if (uv_write(&write->request, Stream(connection), &buffer, 1, OnWritten) != 0) {
      delete write;
      Close(connection);
    }
  }

  static void OnWritten(uv_write_t* request, int status) {
    auto* connection = static_cast<Connection*>(request->handle->data);
    delete reinterpret_cast<WriteRequest*>(request);
    if (connection->closing) return;
    TcpStoreServerImpl* self = connection->server;
    if (status < 0) {
      self->Close(connection);
      return;
    }
    self->Process(connection);  // it may have paused on a full reply queue
  }

  // Tells the client why, then closes its connection once the reply is out.
  void Refuse(Connection* connection, const std::string& reason) {
    if (connection->closing || connection->refusing) return;
    Send(connection, FrameWriter(MessageType::kError).Str(reason).Finish());
    if (connection->closing) return;
    connection->refusing = true;
    uv_read_stop(Stream(connection));
    connection->reading = false;
    connection->input.clear();
    connection->input_offset = 0;
    auto* shutdown = new ShutdownRequest;
    if (uv_shutdown(&shutdown->request, Stream(connection), OnShutdown) != 0) {
      delete shutdown;
      Close(connection);
    }
  }

  static void OnShutdown(uv_shutdown_t* request, int /*status*/) {
    auto* connection = static_cast<Connection*>(request->handle->data);
    delete reinterpret_cast<ShutdownRequest*>(request);
    connection->server->Close(connection);
  }

  void Close(Connection* connection) {
    if (connection->closing) return;
    connection->closing = true;
    if (connection->waiter != nullptr) Discard(connection->waiter);
    connections_.erase(connection);
    num_connections_.fetch_sub(1, std::memory_order_relaxed);
    uv_close(reinterpret_cast<uv_handle_t*>(&connection->handle),
             [](uv_handle_t* handle) { delete static_cast<Connection*>(handle->data); });
  }

  // ---- requests ----

  void Handle(Connection* connection, std::string_view body) {
    BodyReader reader(body);
    uint8_t type_byte = 0;
    reader.U8(&type_byte);  // a frame body is never empty
    const auto type = static_cast<MessageType>(type_byte);
    if (!connection->greeted) {
      HandleHello(connection, type, reader);
      return;
    }
    bool well_formed = false;
    switch (type) {
      case MessageType::kSet:
        well_formed = HandleSet(connection, reader);
        break;
      case MessageType::kGet:
        well_formed = HandleGet(connection, reader);
        break;
      case MessageType::kAdd:
        well_formed = HandleAdd(connection, reader);
        break;
      case MessageType::kCompareSet:
        well_formed = HandleCompareSet(connection, reader);
        break;
      case MessageType::kDelete:
        well_formed = HandleDelete(connection, reader);
        break;
      case MessageType::kCheck:
        well_formed = HandleCheck(connection, reader);
        break;
      case MessageType::kWait:
        well_formed = HandleWait(connection, reader);
        break;
      case MessageType::kNumKeys:
        well_formed = reader.AtEnd();
        if (well_formed) {
          Send(connection,
               FrameWriter(MessageType::kInteger).I64(static_cast<int64_t>(data_.size())).Finish());
        }
        break;
      default:
        Refuse(connection, "unknown request type " + std::to_string(type_byte));
        return;
    }
    if (!well_formed) Refuse(connection, "malformed request of type " + std::to_string(type_byte));
  }

  void HandleHello(Connection* connection, MessageType type, BodyReader& reader) {
    uint32_t magic = 0;
    uint32_t version = 0;
    if (type != MessageType::kHello || !reader.U32(&magic) || !reader.U32(&version) ||
        magic != wire::kMagic) {
      Refuse(connection, "not an InfiniCCL store client (bad hello)");
      return;
    }
    if (version != wire::kVersion) {
      Refuse(connection, "store protocol version " + std::to_string(version) +
                             " is not supported; this server speaks version " +
                             std::to_string(wire::kVersion));
      return;
    }
    connection->greeted = true;
    Send(connection, FrameWriter(MessageType::kHelloOk)
                         .U32(wire::kMagic)
                         .U32(wire::kVersion)
                         .U64(options_.max_message_bytes)
                         .Finish());
  }

  bool HandleSet(Connection* connection, BodyReader& reader) {
    std::string key;
    std::string value;
    if (!reader.Str(&key) || !reader.Str(&value) || !reader.AtEnd()) return false;
    Store(key, std::move(value));
    Send(connection, FrameWriter(MessageType::kOk).Finish());
    WakeWaitersOf(key);
    return true;
  }

  bool HandleGet(Connection* connection, BodyReader& reader) {
    std::string key;
    int64_t timeout_ms = 0;
    if (!reader.Str(&key) || !reader.I64(&timeout_ms) || !reader.AtEnd()) return false;
    if (const auto found = data_.find(key); found != data_.end()) {
      Send(connection, FrameWriter(MessageType::kValue).Str(found->second).Finish());
      return true;
    }
    Park(connection, /*is_get=*/true, {key}, timeout_ms);
    return true;
  }

  bool HandleAdd(Connection* connection, BodyReader& reader) {
    std::string key;
    int64_t delta = 0;
    if (!reader.Str(&key) || !reader.I64(&delta) || !reader.AtEnd()) return false;
    int64_t current = 0;
    if (const auto found = data_.find(key); found != data_.end()) {
      const std::string& text = found->second;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), current);
      if (error != std::errc() || end != text.data() + text.size()) {
        Send(connection, FrameWriter(MessageType::kError)
                             .Str("cannot add to key '" + key + "': its value '" +
                                  text.substr(0, 64) + "' is not an integer")
                             .Finish());
        return true;
      }
    }
    int64_t updated = 0;
    if (__builtin_add_overflow(current, delta, &updated)) {
      Send(connection, FrameWriter(MessageType::kError)
                           .Str("adding " + std::to_string(delta) + " to key '" + key + "' (" +
                                std::to_string(current) + ") overflows int64")
                           .Finish());
      return true;
    }
    Store(key, std::to_string(updated));
    Send(connection, FrameWriter(MessageType::kInteger).I64(updated).Finish());
    WakeWaitersOf(key);
    return true;
  }

  bool HandleCompareSet(Connection* connection, BodyReader& reader) {
    std::string key;
    std::string expected;
    std::string desired;
    if (!reader.Str(&key) || !reader.Str(&expected) || !reader.Str(&desired) || !reader.AtEnd()) {
      return false;
    }
    const auto found = data_.find(key);
    const bool matches = found == data_.end() ? expected.empty() : found->second == expected;
    if (!matches) {
      // c10d's answer: the current value, or `expected` for a missing key.
      Send(connection, FrameWriter(MessageType::kValue)
                           .Str(found == data_.end() ? expected : found->second)
                           .Finish());
      return true;
    }
    Store(key, desired);
    Send(connection, FrameWriter(MessageType::kValue).Str(desired).Finish());
    WakeWaitersOf(key);
    return true;
  }

  bool HandleDelete(Connection* connection, BodyReader& reader) {
    std::string key;
    if (!reader.Str(&key) || !reader.AtEnd()) return false;
    const bool existed = data_.erase(key) > 0;
    num_keys_.store(data_.size(), std::memory_order_relaxed);
    Send(connection, FrameWriter(MessageType::kBool).U8(existed ? 1 : 0).Finish());
    return true;
  }

  // Reads "u32 count, count x str" without trusting `count` for allocation.
  static bool ReadKeys(BodyReader& reader, std::vector<std::string>* keys) {
    uint32_t count = 0;
    if (!reader.U32(&count)) return false;
    for (uint32_t i = 0; i < count; ++i) {
      std::string key;
      if (!reader.Str(&key)) return false;
      keys->push_back(std::move(key));
    }
    return true;
  }

  bool HandleCheck(Connection* connection, BodyReader& reader) {
    std::vector<std::string> keys;
    if (!ReadKeys(reader, &keys) || !reader.AtEnd()) return false;
    bool all_exist = true;
    for (const std::string& key : keys) all_exist = all_exist && data_.contains(key);
    Send(connection, FrameWriter(MessageType::kBool).U8(all_exist ? 1 : 0).Finish());
    return true;
  }

  bool HandleWait(Connection* connection, BodyReader& reader) {
    std::vector<std::string> keys;
    int64_t timeout_ms = 0;
    if (!ReadKeys(reader, &keys) || !reader.I64(&timeout_ms) || !reader.AtEnd()) return false;
    std::set<std::string> missing;
    for (std::string& key : keys) {
      if (!data_.contains(key)) missing.insert(std::move(key));
    }
    if (missing.empty()) {
      Send(connection, FrameWriter(MessageType::kOk).Finish());
      return true;
    }
    Park(connection, /*is_get=*/false, std::vector<std::string>(missing.begin(), missing.end()),
         timeout_ms);
    return true;
  }

  void Store(const std::string& key, std::string value) {
    data_.insert_or_assign(key, std::move(value));
    num_keys_.store(data_.size(), std::memory_order_relaxed);
  }

  // ---- waiters ----

  // Blocks the connection's request until every one of `missing_keys` (distinct,
  // none present) exists, or `timeout_ms` passes.
  void Park(Connection* connection, bool is_get, std::vector<std::string> missing_keys,
            int64_t timeout_ms) {
    auto* waiter = new Waiter;
    waiter->connection = connection;
    waiter->is_get = is_get;
    if (is_get) waiter->get_key = missing_keys.front();
    waiter->missing_keys = missing_keys.size();
    for (std::string& key : missing_keys) {
      std::list<Waiter*>& waiting = waiters_by_key_[key];
      waiting.push_back(waiter);
      waiter->registrations.emplace_back(std::move(key), std::prev(waiting.end()));
    }
    connection->waiter = waiter;
    num_waiters_.fetch_add(1, std::memory_order_relaxed);
    uv_timer_init(&loop_, &waiter->timer);
    waiter->timer.data = waiter;
    uv_timer_start(&waiter->timer, OnWaiterTimeout,
                   static_cast<uint64_t>(std::max<int64_t>(timeout_ms, 0)), 0);
  }

  void WakeWaitersOf(const std::string& key) {
    const auto found = waiters_by_key_.find(key);
    if (found == waiters_by_key_.end()) return;
    const std::list<Waiter*> woken = std::move(found->second);
    waiters_by_key_.erase(found);
    std::vector<Connection*> resumed;
    for (Waiter* waiter : woken) {
      auto& registrations = waiter->registrations;
      std::erase_if(registrations,
                    [&key](const auto& registration) { return registration.first == key; });
      if (--waiter->missing_keys > 0) continue;
      Connection* connection = waiter->connection;
      std::string reply =
          waiter->is_get ? FrameWriter(MessageType::kValue).Str(data_.at(waiter->get_key)).Finish()
                         : FrameWriter(MessageType::kOk).Finish();
      // Counters change before the reply leaves, so a client that got its
      // answer sees them settled.
      Discard(waiter);
      Send(connection, std::move(reply));
      resumed.push_back(connection);
    }
    // Only now, with `woken` fully handled, may the woken clients' next
    // requests run (they may set or wait on keys again).
    for (Connection* connection : resumed) Process(connection);
  }

  static void OnWaiterTimeout(uv_timer_t* timer) {
    auto* waiter = static_cast<Waiter*>(timer->data);
    Connection* connection = waiter->connection;
    TcpStoreServerImpl* self = connection->server;
    self->Discard(waiter);
    self->Send(connection, FrameWriter(MessageType::kTimeout).Finish());
    self->Process(connection);
  }

  // Removes `waiter` from every per-key list and frees it (after its timer
  // handle is closed).
  void Discard(Waiter* waiter) {
    for (auto& [key, position] : waiter->registrations) {
      const auto found = waiters_by_key_.find(key);
      found->second.erase(position);
      if (found->second.empty()) waiters_by_key_.erase(found);
    }
    waiter->registrations.clear();
    waiter->connection->waiter = nullptr;
    num_waiters_.fetch_sub(1, std::memory_order_relaxed);
    uv_timer_stop(&waiter->timer);
    uv_close(reinterpret_cast<uv_handle_t*>(&waiter->timer),
             [](uv_handle_t* handle) { delete static_cast<Waiter*>(handle->data); });
  }

  // ---- stop ----

  static void OnStop(uv_async_t* async) {
    auto* self = static_cast<TcpStoreServerImpl*>(async->data);
    self->stopping_ = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&self->listener_), nullptr);
    self->listener_open_ = false;
    const std::vector<Connection*> open(self->connections_.begin(), self->connections_.end());
    for (Connection* connection : open) self->Close(connection);
    uv_close(reinterpret_cast<uv_handle_t*>(&self->stop_async_), nullptr);
  }

  const TcpStoreServerOptions options_;
  uv_loop_t loop_{};
  uv_tcp_t listener_{};
  uv_async_t stop_async_{};
  bool loop_initialized_ = false;
  bool listener_open_ = false;
  bool stopping_ = false;
  uint16_t port_ = 0;
  std::thread thread_;

  // Loop thread only.
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, std::list<Waiter*>> waiters_by_key_;
  std::unordered_set<Connection*> connections_;
  std::vector<char> read_chunk_;

  std::atomic<size_t> num_keys_{0};
  std::atomic<size_t> num_waiters_{0};
  std::atomic<size_t> num_connections_{0};
};

}  // namespace

std::unique_ptr<TcpStoreServer> TcpStoreServer::Start(const TcpStoreServerOptions& options) {
  auto server = std::make_unique<TcpStoreServerImpl>(options);
  server->Listen();
  server->StartThread();
  return server;
}

}  // namespace infini::rendezvous
