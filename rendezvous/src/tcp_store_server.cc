// The store server's connection layer: one libuv loop on one thread accepts
// connections, frames their bytes, runs the hello (and the run token's
// challenge), enforces the caps and timeouts, and hands decoded requests to
// the KeyValueTable, which owns keys, waiters and deadlines.
//
// No recursion: the table puts answers in its outbox; Pump() delivers them
// and processes the connections they made ready, in a loop, so however long a
// chain of wake-ups is, the stack stays as deep as one request.
//
// Memory: a connection's input grows only as bytes arrive, never to what a
// frame announces; before its hello is accepted it may hold at most
// max_unauthenticated_bytes. Received-but-unhandled bytes and unsent replies
// of all connections are counted together; above max_buffered_bytes no
// connection is read, and a connection whose own replies pile up (a client
// that does not read) is neither read nor served until they drain.

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "hello_auth.h"
#include "infini/common/one_line.h"
#include "infini/rendezvous/endpoint.h"
#include "infini/rendezvous/tcp_store.h"
#include "key_value_table.h"
#include "request_codec.h"
#include "wire_protocol.h"

namespace infini::rendezvous {
namespace {

using wire::FrameWriter;
using wire::MessageType;

// Replies queued for one connection above which it is neither read nor served
// until its client catches up.
constexpr size_t kMaxUnsentBytesPerConnection = size_t{4} << 20;
constexpr size_t kReadChunkBytes = size_t{64} << 10;
// Keepalive probes find a peer that vanished without a FIN (a half-open
// connection) while its request waits: 30 s quiet, then 3 probes 10 s apart.
constexpr int kKeepaliveIdleSeconds = 30;
constexpr int kKeepaliveIntervalSeconds = 10;
constexpr int kKeepaliveProbes = 3;

enum class HelloState { kAwaitHello, kAwaitProof, kReady };

class TcpStoreServerImpl;

struct Connection {
  uv_tcp_t handle;
  TcpStoreServerImpl* server = nullptr;
  ClientId id = 0;
  wire::FrameParser input;
  size_t counted_input_bytes = 0;  // input's share of the server's buffered bytes
  size_t unsent_bytes = 0;         // replies handed to libuv, not yet written
  HelloState hello = HelloState::kAwaitHello;
  // Both sides' challenges, while hello == kAwaitProof.
  std::string client_nonce;
  std::string server_nonce;
  Milliseconds accepted_at = 0;
  Milliseconds last_activity = 0;  // a byte read or a reply written
  bool reading = false;
  bool closing = false;   // uv_close was called; freed in its callback
  bool refusing = false;  // an error reply is being flushed before closing
  bool waiting = false;   // its request waits in the table
  bool ready = false;     // in the server's ready queue
  bool paused_for_memory = false;
};

struct WriteRequest {
  uv_write_t request;
  wire::EncodedReply reply;
};

struct ShutdownRequest {
  uv_shutdown_t request;
};

std::string UvError(int code) { return uv_strerror(code); }

void CheckOptions(const TcpStoreServerOptions& options) {
  auto refuse = [](const std::string& text) {
    throw std::invalid_argument("TcpStoreServerOptions: " + text);
  };
  if (options.host.empty()) refuse("host='': expected an address or a name to bind");
  if (options.max_message_bytes < wire::kMessageOverheadBytes ||
      options.max_message_bytes > std::numeric_limits<uint32_t>::max()) {
    refuse("max_message_bytes=" + std::to_string(options.max_message_bytes) + ": expected " +
           std::to_string(wire::kMessageOverheadBytes) + "..4294967295");
  }
  if (options.max_keys_per_request == 0) refuse("max_keys_per_request=0: expected at least 1");
  if (options.max_unauthenticated_bytes < wire::kMessageOverheadBytes) {
    refuse("max_unauthenticated_bytes=" + std::to_string(options.max_unauthenticated_bytes) +
           ": expected at least " + std::to_string(wire::kMessageOverheadBytes));
  }
  if (options.max_buffered_bytes / 2 < options.max_message_bytes + wire::kFrameHeaderBytes) {
    refuse("max_buffered_bytes=" + std::to_string(options.max_buffered_bytes) +
           ": expected at least twice max_message_bytes (" +
           std::to_string(options.max_message_bytes) + ")");
  }
  if (options.hello_timeout.count() <= 0) refuse("hello_timeout: expected a positive duration");
  if (options.idle_timeout.count() < 0) refuse("idle_timeout: expected 0 (never) or positive");
}

class TcpStoreServerImpl final : public TcpStoreServer {
 public:
  explicit TcpStoreServerImpl(const TcpStoreServerOptions& options) : options_(options) {
    read_chunk_.resize(kReadChunkBytes);
    limits_.max_keys_per_request = options_.max_keys_per_request;
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
    const std::string where = OneLine(FormatEndpoint({options_.host, options_.port}));
    CheckUv(uv_loop_init(&loop_), where, "could not create its event loop");
    loop_initialized_ = true;
    InitHandle(uv_tcp_init(&loop_, &listener_), &listener_, where);
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
    InitHandle(uv_timer_init(&loop_, &deadline_timer_), &deadline_timer_, where);
    InitHandle(uv_timer_init(&loop_, &sweep_timer_), &sweep_timer_, where);
    InitHandle(uv_async_init(&loop_, &stop_async_, OnStop), &stop_async_, where);
    const auto interval = SweepIntervalMs();
    uv_timer_start(&sweep_timer_, OnSweep, interval, interval);
  }

  void StartThread() {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "infini_store");
      uv_run(&loop_, UV_RUN_DEFAULT);
      auth::ReleaseThreadState();
    });
  }

  uint16_t port() const override { return port_; }
  size_t num_keys() const override { return num_keys_.load(std::memory_order_relaxed); }
  size_t num_waiters() const override { return num_waiters_.load(std::memory_order_relaxed); }
  size_t num_connections() const override {
    return num_connections_.load(std::memory_order_relaxed);
  }
  size_t num_refused_hellos() const override {
    return num_refused_hellos_.load(std::memory_order_relaxed);
  }
  size_t buffered_bytes() const override {
    return buffered_bytes_published_.load(std::memory_order_relaxed);
  }

 private:
  // ---- set-up ----

  template <typename Handle>
  void InitHandle(int result, Handle* handle, const std::string& where) {
    CheckUv(result, where, "could not create a libuv handle");
    handle->data = this;
    open_handles_.push_back(reinterpret_cast<uv_handle_t*>(handle));
  }

  void CheckUv(int result, const std::string& where, const char* what) {
    if (result == 0) return;
    CloseServerHandles();
    throw StoreError("store server on " + where + " " + what + ": " + UvError(result));
  }

  void CloseServerHandles() {
    for (uv_handle_t* handle : open_handles_) uv_close(handle, nullptr);
    open_handles_.clear();
  }

  void ResolveBindAddress(const std::string& where, sockaddr_storage* address) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* results = nullptr;
    const std::string port_text = std::to_string(options_.port);
    const int result = getaddrinfo(options_.host.c_str(), port_text.c_str(), &hints, &results);
    if (result != 0) {
      CloseServerHandles();
      throw StoreError("store server on " + where + " could not resolve host '" +
                       OneLine(options_.host) + "': " + gai_strerror(result));
    }
    std::memcpy(address, results->ai_addr, results->ai_addrlen);
    freeaddrinfo(results);
  }

  uint64_t SweepIntervalMs() const {
    auto shortest = options_.hello_timeout;
    if (options_.idle_timeout.count() > 0) shortest = std::min(shortest, options_.idle_timeout);
    return static_cast<uint64_t>(std::clamp<int64_t>(shortest.count() / 4, 10, 1000));
  }

  Milliseconds Now() const { return static_cast<Milliseconds>(uv_now(&loop_)); }

  // ---- connections ----

  static uv_stream_t* Stream(Connection* connection) {
    return reinterpret_cast<uv_stream_t*>(&connection->handle);
  }

  static void OnConnection(uv_stream_t* listener, int status) {
    auto* self = static_cast<TcpStoreServerImpl*>(listener->data);
    if (status < 0 || self->stopping_) {
      self->WarnIfNearDescriptorLimit(nullptr, status);
      return;
    }
    auto* connection = new Connection;
    connection->server = self;
    connection->id = ++self->last_client_id_;
    connection->handle.data = connection;
    if (uv_tcp_init(&self->loop_, &connection->handle) != 0) {
      delete connection;
      return;
    }
    self->connections_.emplace(connection->id, connection);
    self->num_connections_.store(self->connections_.size(), std::memory_order_relaxed);
    if (uv_accept(listener, Stream(connection)) != 0) {
      self->Close(connection);
      return;
    }
    connection->accepted_at = connection->last_activity = self->Now();
    self->WarnIfNearDescriptorLimit(connection, 0);
    uv_tcp_nodelay(&connection->handle, 1);
    EnableKeepalive(connection);
    self->UpdateReading(connection);
  }

  // Past the process's open-file limit, libuv accepts and at once closes the
  // connections it has no descriptor for (so that the loop does not spin),
  // and the clients see a closed connection. Said before that happens (a
  // connection's descriptor at 90 % of the limit: descriptors are handed out
  // lowest first) and when it does, once a minute at most, naming the limit.
  void WarnIfNearDescriptorLimit(Connection* accepted, int status) {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
    const bool out = status == UV_EMFILE || status == UV_ENFILE;
    uv_os_fd_t fd = -1;
    if (!out && (accepted == nullptr ||
                 uv_fileno(reinterpret_cast<uv_handle_t*>(&accepted->handle), &fd) != 0 ||
                 static_cast<rlim_t>(fd) * 10 < limit.rlim_cur * 9)) {
      return;
    }
    const uint64_t now = Now();
    if (warned_about_descriptors_at_ != 0 && now - warned_about_descriptors_at_ < 60000) return;
    warned_about_descriptors_at_ = now;
    std::fprintf(stderr,
                 "store at %s: %zu connections %s the open-file soft limit %llu; raise it "
                 "(ulimit -n) on the host of the store\n",
                 FormatEndpoint({options_.host, port_}).c_str(), connections_.size(),
                 out ? "have reached" : "are near",
                 static_cast<unsigned long long>(limit.rlim_cur));
  }

  static void EnableKeepalive(Connection* connection) {
    uv_tcp_keepalive(&connection->handle, 1, kKeepaliveIdleSeconds);
    uv_os_fd_t fd;
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0) return;
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepaliveIntervalSeconds,
                 sizeof(kKeepaliveIntervalSeconds));
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepaliveProbes, sizeof(kKeepaliveProbes));
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
      self->Pump();
      return;
    }
    if (bytes_read == 0 || connection->refusing || connection->closing) return;
    const auto count = static_cast<size_t>(bytes_read);
    if (connection->hello != HelloState::kReady &&
        connection->input.buffered_bytes() + count > self->options_.max_unauthenticated_bytes) {
      // Not even copied: a stranger gets a few KiB of this server, no more.
      self->Refuse(connection, "more than " +
                                   std::to_string(self->options_.max_unauthenticated_bytes) +
                                   " bytes before the hello was accepted");
      self->Pump();
      return;
    }
    connection->input.Append(buffer->base, count);
    self->CountInput(connection);
    connection->last_activity = self->Now();
    self->MarkReady(connection);
    self->Pump();
  }

  void CountInput(Connection* connection) {
    const size_t held = connection->input.held_bytes();
    buffered_bytes_ = buffered_bytes_ - connection->counted_input_bytes + held;
    connection->counted_input_bytes = held;
  }

  bool CanServe(const Connection* connection) const {
    return !connection->closing && !connection->refusing && !connection->waiting &&
           connection->unsent_bytes <= kMaxUnsentBytesPerConnection;
  }

  void MarkReady(Connection* connection) {
    if (connection->ready || connection->closing) return;
    connection->ready = true;
    ready_.push_back(connection);
  }

  // Delivers the table's answers and serves every connection that became
  // ready, until none is left. Re-entry (from a callback inside) only adds
  // work to the queues that the outer call drains.
  void Pump() {
    if (pumping_) return;
    pumping_ = true;
    DeliverCompletions();
    while (!ready_.empty()) {
      Connection* connection = ready_.front();
      ready_.pop_front();
      connection->ready = false;
      if (!connection->closing) Serve(connection);
    }
    pumping_ = false;
    ResumeReadingIfMemoryAllows();
    ArmDeadlineTimer();
    PublishCounters();
  }

  void PublishCounters() {
    num_keys_.store(table_.num_keys(), std::memory_order_relaxed);
    num_waiters_.store(table_.num_waiters(), std::memory_order_relaxed);
    buffered_bytes_published_.store(buffered_bytes_, std::memory_order_relaxed);
  }

  void DeliverCompletions() {
    if (!table_.HasCompletions()) return;
    // Counters change before the replies leave (uv_write may send at once),
    // so a client that got its answer sees them settled.
    PublishCounters();
    for (Completion& completion : table_.TakeCompletions()) {
      const auto found = connections_.find(completion.client);
      if (found == connections_.end() || found->second->closing) continue;
      Connection* connection = found->second;
      Send(connection, wire::EncodeReply(completion.reply));
      if (connection->waiting && !table_.IsWaiting(connection->id)) {
        connection->waiting = false;
        MarkReady(connection);
      }
    }
  }

  // Handles the connection's buffered requests, in order, until one waits,
  // its replies pile up, or no whole frame is left.
  void Serve(Connection* connection) {
    while (CanServe(connection)) {
      const size_t limit = connection->hello == HelloState::kReady
                               ? options_.max_message_bytes
                               : options_.max_unauthenticated_bytes;
      std::string_view body;
      const auto status = connection->input.Next(limit, &body);
      if (status == wire::FrameParser::Status::kNeedMore) break;
      if (status == wire::FrameParser::Status::kTooLarge) {
        Refuse(connection, TooLargeText(connection));
        return;
      }
      if (connection->hello == HelloState::kReady) {
        HandleRequest(connection, body);
      } else {
        HandleHello(connection, body);
      }
      DeliverCompletions();
    }
    if (connection->closing || connection->refusing) return;
    connection->input.Compact();
    CountInput(connection);
    UpdateReading(connection);
  }

  std::string TooLargeText(const Connection* connection) const {
    const uint32_t announced = connection->input.announced_body_bytes();
    if (connection->hello != HelloState::kReady) {
      return "message of " + std::to_string(announced) +
             " bytes refused before the hello was accepted (at most " +
             std::to_string(options_.max_unauthenticated_bytes) + ")";
    }
    return "message of " + std::to_string(announced) +
           " bytes refused: the store's max_message_bytes is " +
           std::to_string(options_.max_message_bytes);
  }

  bool WantsToRead(const Connection* connection) const {
    if (connection->closing || connection->refusing) return false;
    if (connection->unsent_bytes > kMaxUnsentBytesPerConnection) return false;
    if (buffered_bytes_ >= options_.max_buffered_bytes) return false;
    // One whole message buffered is enough; more waits in the kernel. (A
    // waiting connection keeps reading up to that, so that a client that
    // leaves is noticed.)
    return connection->input.buffered_bytes() <=
           options_.max_message_bytes + wire::kFrameHeaderBytes;
  }

  void UpdateReading(Connection* connection) {
    if (connection->closing || connection->refusing) return;
    const bool want = WantsToRead(connection);
    if (!want && buffered_bytes_ >= options_.max_buffered_bytes && !connection->paused_for_memory) {
      connection->paused_for_memory = true;
      paused_for_memory_.push_back(connection->id);
    }
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

  void ResumeReadingIfMemoryAllows() {
    if (paused_for_memory_.empty() || buffered_bytes_ >= options_.max_buffered_bytes) return;
    for (const ClientId id : std::exchange(paused_for_memory_, {})) {
      const auto found = connections_.find(id);
      if (found == connections_.end()) continue;
      found->second->paused_for_memory = false;
      UpdateReading(found->second);
    }
  }

  void Send(Connection* connection, wire::EncodedReply reply) {
    if (connection->closing) return;
    auto* write = new WriteRequest;
    write->reply = std::move(reply);
    uv_buf_t buffers[2];
    buffers[0] =
        uv_buf_init(write->reply.head.data(), static_cast<unsigned>(write->reply.head.size()));
    unsigned count = 1;
    if (write->reply.value) {
      // libuv only reads from this buffer; the value is shared, not copied.
      buffers[1] = uv_buf_init(const_cast<char*>(write->reply.value->data()),
                               static_cast<unsigned>(write->reply.value->size()));
      count = 2;
    }
    const size_t bytes = write->reply.size();
    if (uv_write(&write->request, Stream(connection), buffers, count, OnWritten) != 0) {
      delete write;
      Close(connection);
      return;
    }
    connection->unsent_bytes += bytes;
    buffered_bytes_ += bytes;
  }

  static void OnWritten(uv_write_t* request, int status) {
    auto* connection = static_cast<Connection*>(request->handle->data);
    auto* write = reinterpret_cast<WriteRequest*>(request);
    TcpStoreServerImpl* self = connection->server;
    const size_t bytes = write->reply.size();
    delete write;
    connection->unsent_bytes -= bytes;
    self->buffered_bytes_ -= bytes;
    if (connection->closing) return;
    if (status < 0) {
      self->Close(connection);
    } else {
      connection->last_activity = self->Now();
      self->MarkReady(connection);  // it may have paused on its reply queue
    }
    self->Pump();
  }

  // Tells the client why, then closes its connection once the reply is out.
  void Refuse(Connection* connection, const std::string& reason) {
    if (connection->closing || connection->refusing) return;
    if (connection->hello != HelloState::kReady) {
      num_refused_hellos_.fetch_add(1, std::memory_order_relaxed);
    }
    Send(connection, wire::EncodedReply{FrameWriter(MessageType::kError).Str(reason).Finish(), {}});
    if (connection->closing) return;
    connection->refusing = true;
    uv_read_stop(Stream(connection));
    connection->reading = false;
    connection->input.Clear();
    CountInput(connection);
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
    if (connection->hello == HelloState::kAwaitProof && !connection->refusing) {
      // A client that would not answer the challenge (it had no token).
      num_refused_hellos_.fetch_add(1, std::memory_order_relaxed);
    }
    connection->closing = true;
    table_.Forget(connection->id);
    connection->input.Clear();
    CountInput(connection);
    connections_.erase(connection->id);
    num_connections_.store(connections_.size(), std::memory_order_relaxed);
    uv_close(reinterpret_cast<uv_handle_t*>(&connection->handle),
             [](uv_handle_t* handle) { delete static_cast<Connection*>(handle->data); });
  }

  // ---- hello ----

  void HandleHello(Connection* connection, std::string_view body) {
    if (connection->hello == HelloState::kAwaitProof) {
      std::string proof;
      const std::string error = wire::DecodeProof(body, &proof);
      if (!error.empty() ||
          !auth::ProofMatches(auth::Side::kClient, options_.token, connection->client_nonce,
                              connection->server_nonce, proof)) {
        Refuse(connection, error.empty() ? "the proof does not match this run's token" : error);
        return;
      }
      Accept(connection);
      return;
    }
    uint32_t version = 0;
    std::string client_nonce;
    if (const std::string error = wire::DecodeHello(body, &version, &client_nonce);
        !error.empty()) {
      Refuse(connection, error);
      return;
    }
    if (version != wire::kVersion) {
      Refuse(connection, "store protocol version " + std::to_string(version) +
                             " is not supported; this server speaks version " +
                             std::to_string(wire::kVersion));
      return;
    }
    if (options_.token.empty()) {
      Accept(connection);
      return;
    }
    std::string server_proof;
    try {
      connection->server_nonce = auth::RandomBytes(wire::kNonceBytes);
      server_proof = auth::ProofFor(auth::Side::kServer, options_.token, client_nonce,
                                    connection->server_nonce);
    } catch (const StoreError& error) {
      Refuse(connection, std::string("the store cannot make a challenge: ") + error.what());
      return;
    }
    connection->client_nonce = std::move(client_nonce);
    connection->hello = HelloState::kAwaitProof;
    Send(connection, wire::EncodedReply{FrameWriter(MessageType::kChallenge)
                                            .Str(connection->server_nonce)
                                            .Str(server_proof)
                                            .Finish(),
                                        {}});
  }

  void Accept(Connection* connection) {
    connection->hello = HelloState::kReady;
    connection->client_nonce.clear();
    connection->server_nonce.clear();
    Send(connection, wire::EncodedReply{FrameWriter(MessageType::kHelloOk)
                                            .U32(wire::kMagic)
                                            .U32(wire::kVersion)
                                            .U64(options_.max_message_bytes)
                                            .U32(static_cast<uint32_t>(std::min<size_t>(
                                                options_.max_keys_per_request, UINT32_MAX)))
                                            .Finish(),
                                        {}});
  }

  // ---- requests ----

  void HandleRequest(Connection* connection, std::string_view body) {
    wire::Request request;
    if (const std::string error = wire::DecodeRequest(body, limits_, &request); !error.empty()) {
      Refuse(connection, error);
      return;
    }
    connection->waiting = !table_.Handle(connection->id, request, Now());
  }

  // ---- timers ----

  void ArmDeadlineTimer() {
    if (stopping_) return;
    const Milliseconds next = table_.NextDeadline();
    if (next < 0) {
      uv_timer_stop(&deadline_timer_);
      return;
    }
    uv_timer_start(&deadline_timer_, OnDeadline,
                   static_cast<uint64_t>(std::max<Milliseconds>(next - Now(), 0)), 0);
  }

  static void OnDeadline(uv_timer_t* timer) {
    auto* self = static_cast<TcpStoreServerImpl*>(timer->data);
    self->table_.ExpireWaiters(self->Now());
    self->Pump();
  }

  // Closes connections that never finished their hello, and idle ones.
  static void OnSweep(uv_timer_t* timer) {
    auto* self = static_cast<TcpStoreServerImpl*>(timer->data);
    const Milliseconds now = self->Now();
    const Milliseconds hello_ms = self->options_.hello_timeout.count();
    const Milliseconds idle_ms = self->options_.idle_timeout.count();
    std::vector<Connection*> expired;
    for (const auto& [id, connection] : self->connections_) {
      const bool hello_late =
          connection->hello != HelloState::kReady && now - connection->accepted_at >= hello_ms;
      const bool idle = connection->hello == HelloState::kReady && idle_ms > 0 &&
                        !connection->waiting && now - connection->last_activity >= idle_ms;
      const bool refusal_stuck =
          connection->refusing && now - connection->last_activity >= hello_ms;
      if (hello_late || idle || refusal_stuck) expired.push_back(connection);
    }
    for (Connection* connection : expired) self->Close(connection);
    if (!expired.empty()) self->Pump();
  }

  // ---- stop ----

  static void OnStop(uv_async_t* async) {
    auto* self = static_cast<TcpStoreServerImpl*>(async->data);
    self->stopping_ = true;
    std::vector<Connection*> open;
    for (const auto& [id, connection] : self->connections_) open.push_back(connection);
    for (Connection* connection : open) self->Close(connection);
    self->CloseServerHandles();
  }

  const TcpStoreServerOptions options_;
  wire::RequestLimits limits_;
  uv_loop_t loop_{};
  uv_tcp_t listener_{};
  uv_timer_t deadline_timer_{};
  uv_timer_t sweep_timer_{};
  uv_async_t stop_async_{};
  std::vector<uv_handle_t*> open_handles_;  // the server's own handles, to close
  bool loop_initialized_ = false;
  bool stopping_ = false;
  uint16_t port_ = 0;
  uint64_t warned_about_descriptors_at_ = 0;  // Now() of the last warning
  std::thread thread_;

  // Loop thread only.
  KeyValueTable table_;
  std::unordered_map<ClientId, Connection*> connections_;
  ClientId last_client_id_ = 0;
  std::deque<Connection*> ready_;
  std::vector<ClientId> paused_for_memory_;
  bool pumping_ = false;
  size_t buffered_bytes_ = 0;
  std::vector<char> read_chunk_;

  std::atomic<size_t> num_keys_{0};
  std::atomic<size_t> num_waiters_{0};
  std::atomic<size_t> num_connections_{0};
  std::atomic<size_t> num_refused_hellos_{0};
  std::atomic<size_t> buffered_bytes_published_{0};
};

}  // namespace

std::unique_ptr<TcpStoreServer> TcpStoreServer::Start(const TcpStoreServerOptions& options) {
  CheckOptions(options);
  auto server = std::make_unique<TcpStoreServerImpl>(options);
  server->Listen();
  server->StartThread();
  return server;
}

}  // namespace infini::rendezvous
