// The store server's connection layer: one libuv loop on one thread accepts
// connections, frames their bytes, runs the hello (and the run token's
// challenge), enforces the caps and timeouts, and hands decoded requests to
// the KeyValueTable, which owns keys, waiters and deadlines.
//
// No recursion: the table puts answers in its outbox; Pump() delivers them
// and processes the connections they made ready, in a loop, so however long a
// chain of wake-ups is, the stack stays as deep as one request.
//
// Memory, by admission (so that legal traffic cannot wedge the store): a
// connection that passed the hello may hold kUnchargedInputBytes of input
// without asking (small requests, the header of the next one). A larger
// request is charged to max_buffered_bytes with its whole size when its
// header arrives, and read only once the budget holds all of it; requests
// wait for that in one queue, first come first admitted. An admitted request
// is always read to its end, whatever else happens, so it completes and gives
// its charge back: several half-received requests can never starve each
// other. Waiters' bookkeeping (the table's) and unsent replies (less the
// values that they share with the store) are charged to the same budget;
// waiters may take all of it but one largest request. Stored keys and values
// have their own cap (max_stored_bytes, the table's). A connection that is
// not read (waiting for admission, or its input allowance full) is still
// watched for its peer's close or reset, through a second epoll instance that
// the loop polls, so a client that leaves is noticed at once.
//
// Strangers: a connection that has not completed its hello may hold
// max_unauthenticated_bytes. Such connections are capped in all and per peer
// address; a new one beyond a cap closes the oldest (of that address, or of
// all), and so does one that finds the descriptors near the open-file limit.
// A client holding the token puts a ticket in its hello's nonce (hello_auth)
// and is never closed to make room; the hello already waiting on a socket is
// read as it is accepted, and accepts are taken a few per loop turn, so that
// the others are served between them.

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
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
// until its client catches up; while the budget is spent, the bound is lower.
constexpr size_t kMaxUnsentBytesPerConnection = size_t{4} << 20;
constexpr size_t kMaxUnsentBytesOverBudget = size_t{64} << 10;
constexpr size_t kReadChunkBytes = size_t{64} << 10;
// Input a connection past its hello may hold without admission: small
// requests, and the start of the next one. Not charged (bounded per
// connection); a frame larger than this is admitted whole first.
constexpr size_t kUnchargedInputBytes = size_t{4} << 10;
// An unauthenticated connection this old may be closed when descriptors run
// short (the caps close the oldest whatever its age).
constexpr Milliseconds kDescriptorShedAfterMs = 1000;
// Connections accepted per loop turn; the rest wait in the kernel's queue
// until the connections already open were served.
constexpr unsigned kAcceptsPerTurn = 16;
// Free memory given back to the system (malloc_trim) once this much of what
// the store held (keys, values, waiters, requests) was freed.
constexpr size_t kTrimAfterFreedBytes = size_t{32} << 20;
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
  size_t admitted_bytes = 0;       // the first frame's size once admitted (charged)
  HelloState hello = HelloState::kAwaitHello;
  // Both sides' challenges, while hello == kAwaitProof.
  std::string client_nonce;
  std::string server_nonce;
  Milliseconds accepted_at = 0;
  Milliseconds last_activity = 0;  // a byte read or a reply written
  // Its peer's address (bytes), and its places in the lists of connections
  // that may be shed, while listed.
  std::string peer;
  std::list<Connection*>::iterator in_unauthenticated;
  std::list<Connection*>::iterator in_peer;
  bool listed = false;
  bool reading = false;
  bool watched = false;   // in the hang-up epoll set (not being read)
  bool queued = false;    // waits for admission of its first frame
  bool closing = false;   // uv_close was called; freed in its callback
  bool refusing = false;  // an error reply is being flushed before closing
  bool shed = false;      // closed to make room, not refused
  bool waiting = false;   // its request waits in the table
  bool ready = false;     // in the server's ready queue
};

struct WriteRequest {
  uv_write_t request;
  wire::EncodedReply reply;
  size_t charge = 0;  // its share of the budget (the value is the store's)
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
  if (options.max_stored_bytes < options.max_message_bytes) {
    refuse("max_stored_bytes=" + std::to_string(options.max_stored_bytes) +
           ": expected at least max_message_bytes (" + std::to_string(options.max_message_bytes) +
           ")");
  }
  if (options.max_unauthenticated_connections == 0) {
    refuse("max_unauthenticated_connections=0: expected at least 1");
  }
  if (options.max_unauthenticated_per_peer == 0) {
    refuse("max_unauthenticated_per_peer=0: expected at least 1");
  }
  if (options.hello_timeout.count() <= 0) refuse("hello_timeout: expected a positive duration");
  if (options.idle_timeout.count() < 0) refuse("idle_timeout: expected 0 (never) or positive");
  if (options.stalled_request_timeout.count() <= 0) {
    refuse("stalled_request_timeout: expected a positive duration");
  }
}

TableLimits LimitsOf(const TcpStoreServerOptions& options) {
  TableLimits limits;
  limits.max_stored_bytes = options.max_stored_bytes;
  // Waiters may take the budget but for one largest request, which can then
  // always be admitted once the others in flight have completed.
  limits.max_waiter_bytes =
      options.max_buffered_bytes - options.max_message_bytes - wire::kFrameHeaderBytes;
  return limits;
}

// The bytes of a peer's address (an IPv4 address mapped into IPv6 as IPv4),
// or "" when it cannot be read.
std::string PeerKey(const uv_tcp_t* handle) {
  sockaddr_storage address{};
  int length = sizeof(address);
  if (uv_tcp_getpeername(handle, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  if (address.ss_family == AF_INET) {
    const auto& ip = reinterpret_cast<const sockaddr_in&>(address).sin_addr;
    return std::string(reinterpret_cast<const char*>(&ip), sizeof(ip));
  }
  if (address.ss_family == AF_INET6) {
    const auto& ip = reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
    const auto* bytes = reinterpret_cast<const char*>(&ip);
    if (IN6_IS_ADDR_V4MAPPED(&ip)) return std::string(bytes + 12, 4);
    return std::string(bytes, sizeof(ip));
  }
  return "";
}

class TcpStoreServerImpl final : public TcpStoreServer {
 public:
  explicit TcpStoreServerImpl(const TcpStoreServerOptions& options)
      : options_(options), table_(LimitsOf(options)) {
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
    if (hangup_fd_ >= 0) ::close(hangup_fd_);
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
    InitHandle(uv_check_init(&loop_, &turn_check_), &turn_check_, where);
    uv_check_start(&turn_check_, OnTurnEnd);
    hangup_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (hangup_fd_ < 0) {
      CloseServerHandles();
      throw StoreError("store server on " + where +
                       " could not create an epoll instance: " + std::strerror(errno));
    }
    InitHandle(uv_poll_init(&loop_, &hangup_poll_, hangup_fd_), &hangup_poll_, where);
    uv_poll_start(&hangup_poll_, UV_READABLE, OnHangup);
    const auto interval = SweepIntervalMs();
    uv_timer_start(&sweep_timer_, OnSweep, interval, interval);
    ReadDescriptorLimit();
  }

  void StartThread() {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "infini_store");
      // libuv writes with writev(2): a reply to a client that reset its
      // connection raises SIGPIPE, whose default action kills the process
      // (the launcher, a rank). Blocked on this thread, the write fails with
      // EPIPE and that connection is closed; the pending signal dies with the
      // thread.
      sigset_t pipe_only;
      sigemptyset(&pipe_only);
      sigaddset(&pipe_only, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
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
  size_t charged_bytes() const override {
    return charged_bytes_published_.load(std::memory_order_relaxed);
  }
  size_t stored_bytes() const override {
    return stored_bytes_published_.load(std::memory_order_relaxed);
  }
  size_t num_shed_connections() const override { return num_shed_.load(std::memory_order_relaxed); }

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
    auto shortest = std::min(options_.hello_timeout, options_.stalled_request_timeout);
    if (options_.idle_timeout.count() > 0) shortest = std::min(shortest, options_.idle_timeout);
    return static_cast<uint64_t>(std::clamp<int64_t>(shortest.count() / 4, 10, 1000));
  }

  Milliseconds Now() const { return static_cast<Milliseconds>(uv_now(&loop_)); }

  // The process's soft open-file limit (0: none), read at start and by every
  // sweep; and the descriptors kept free of strangers below it.
  void ReadDescriptorLimit() {
    rlimit limit{};
    descriptor_limit_ = getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY
                            ? 0
                            : static_cast<size_t>(limit.rlim_cur);
    descriptor_reserve_ = std::clamp<size_t>(descriptor_limit_ / 8, 16, 1024);
  }

  // ---- budget ----

  size_t Charged() const { return admitted_bytes_ + table_.waiter_bytes() + reply_charge_; }
  bool OverBudget() const { return Charged() >= options_.max_buffered_bytes; }

  // ---- connections ----

  static uv_stream_t* Stream(Connection* connection) {
    return reinterpret_cast<uv_stream_t*>(&connection->handle);
  }

  static void OnConnection(uv_stream_t* listener, int status) {
    auto* self = static_cast<TcpStoreServerImpl*>(listener->data);
    if (self->stopping_) return;
    if (status < 0) {
      // Out of descriptors: libuv took and closed what waited. Strangers
      // make room for the next ones.
      self->WarnIfNearDescriptorLimit(nullptr, status);
      if (status == UV_EMFILE || status == UV_ENFILE) {
        for (int i = 0; i < 16 && !self->unauthenticated_.empty(); ++i) {
          self->Shed(self->unauthenticated_.front());
        }
        self->Pump();
      }
      return;
    }
    if (self->accepted_this_turn_ >= kAcceptsPerTurn) {
      // Not taken now: libuv stops watching the listener until it is.
      self->accept_deferred_ = true;
      return;
    }
    self->AcceptOne();
  }

  // After the loop's I/O of this turn: take the connection left waiting.
  static void OnTurnEnd(uv_check_t* check) {
    auto* self = static_cast<TcpStoreServerImpl*>(check->data);
    self->accepted_this_turn_ = 0;
    if (self->accept_deferred_ && !self->stopping_) {
      self->accept_deferred_ = false;
      self->AcceptOne();
    }
  }

  void AcceptOne() {
    ++accepted_this_turn_;
    auto* connection = new Connection;
    connection->server = this;
    connection->id = ++last_client_id_;
    connection->handle.data = connection;
    if (uv_tcp_init(&loop_, &connection->handle) != 0) {
      delete connection;
      return;
    }
    connections_.emplace(connection->id, connection);
    num_connections_.store(connections_.size(), std::memory_order_relaxed);
    if (uv_accept(reinterpret_cast<uv_stream_t*>(&listener_), Stream(connection)) != 0) {
      Close(connection);
      return;
    }
    connection->accepted_at = connection->last_activity = Now();
    WarnIfNearDescriptorLimit(connection, 0);
    uv_tcp_nodelay(&connection->handle, 1);
    connection->peer = PeerKey(&connection->handle);
    ListUnauthenticated(connection);
    MakeRoomFor(connection);
    ReadWhatArrived(connection);
    UpdateReading(connection);
    Pump();
  }

  // The hello that the client sent right after connecting is usually there
  // by the time it is accepted: read it now, so that a client holding the
  // token is known before any other connection can push it out.
  void ReadWhatArrived(Connection* connection) {
    uv_os_fd_t fd = -1;
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0) return;
    const ssize_t got = ::recv(fd, read_chunk_.data(), read_chunk_.size(), MSG_DONTWAIT);
    if (got > 0) {
      Receive(connection, read_chunk_.data(), static_cast<size_t>(got));
    } else if (got == 0) {
      Close(connection);
    }  // nothing yet, or an error that the first read reports
  }

  // ---- strangers ----

  void ListUnauthenticated(Connection* connection) {
    unauthenticated_.push_back(connection);
    connection->in_unauthenticated = std::prev(unauthenticated_.end());
    std::list<Connection*>& of_peer = unauthenticated_by_peer_[connection->peer];
    of_peer.push_back(connection);
    connection->in_peer = std::prev(of_peer.end());
    connection->listed = true;
  }

  void Unlist(Connection* connection) {
    if (!connection->listed) return;
    connection->listed = false;
    unauthenticated_.erase(connection->in_unauthenticated);
    const auto of_peer = unauthenticated_by_peer_.find(connection->peer);
    of_peer->second.erase(connection->in_peer);
    if (of_peer->second.empty()) unauthenticated_by_peer_.erase(of_peer);
  }

  // Closes the oldest other unauthenticated connections beyond the caps,
  // and one when the descriptors are near the process's limit.
  void MakeRoomFor(Connection* connection) {
    while (connection->listed) {
      const std::list<Connection*>& of_peer = unauthenticated_by_peer_.at(connection->peer);
      if (of_peer.size() <= options_.max_unauthenticated_per_peer) break;
      Shed(of_peer.front());  // never `connection`: it is the newest of at least two
    }
    while (unauthenticated_.size() > options_.max_unauthenticated_connections &&
           unauthenticated_.front() != connection) {
      Shed(unauthenticated_.front());
    }
    uv_os_fd_t fd = -1;
    if (descriptor_limit_ == 0 ||
        uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0) {
      return;
    }
    // Descriptors are handed out lowest first: this one's number tells how
    // many are in use. Only a connection that had time to say its hello is
    // closed for them (a client of the run says it at once; so does one of
    // a store without a token, whose hello is all it needs).
    if (static_cast<size_t>(fd) + descriptor_reserve_ >= descriptor_limit_ &&
        !unauthenticated_.empty() && unauthenticated_.front() != connection &&
        Now() - unauthenticated_.front()->accepted_at >= kDescriptorShedAfterMs) {
      WarnAboutDescriptors(/*reached=*/false);
      Shed(unauthenticated_.front());
    }
  }

  void Shed(Connection* connection) {
    connection->shed = true;
    num_shed_.fetch_add(1, std::memory_order_relaxed);
    Close(connection);
  }

  // Past the process's open-file limit, libuv accepts and at once closes the
  // connections it has no descriptor for (so that the loop does not spin),
  // and the clients see a closed connection. Said before that happens (a
  // connection's descriptor at 90 % of the limit, or strangers shed to keep
  // the reserve: descriptors are handed out lowest first) and when it does,
  // once a minute at most, naming the limit.
  void WarnIfNearDescriptorLimit(Connection* accepted, int status) {
    if (descriptor_limit_ == 0) return;
    const bool out = status == UV_EMFILE || status == UV_ENFILE;
    uv_os_fd_t fd = -1;
    if (!out && (accepted == nullptr ||
                 uv_fileno(reinterpret_cast<uv_handle_t*>(&accepted->handle), &fd) != 0 ||
                 static_cast<size_t>(fd) * 10 < descriptor_limit_ * 9)) {
      return;
    }
    WarnAboutDescriptors(out);
  }

  void WarnAboutDescriptors(bool reached) {
    const uint64_t now = Now();
    if (warned_about_descriptors_at_ != 0 && now - warned_about_descriptors_at_ < 60000) return;
    warned_about_descriptors_at_ = now;
    std::fprintf(stderr,
                 "store at %s: %zu connections %s the open-file soft limit %zu; raise it "
                 "(ulimit -n) on the host of the store\n",
                 FormatEndpoint({options_.host, port_}).c_str(), connections_.size(),
                 reached ? "have reached" : "are near", descriptor_limit_);
  }

  static void EnableKeepalive(Connection* connection) {
    uv_tcp_keepalive(&connection->handle, 1, kKeepaliveIdleSeconds);
    uv_os_fd_t fd;
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0) return;
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepaliveIntervalSeconds,
                 sizeof(kKeepaliveIntervalSeconds));
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepaliveProbes, sizeof(kKeepaliveProbes));
  }

  // ---- reading ----

  // Input a connection past its hello may hold now.
  static size_t InputAllowance(const Connection* connection) {
    return kUnchargedInputBytes + connection->admitted_bytes;
  }

  static void OnAllocate(uv_handle_t* handle, size_t /*suggested*/, uv_buf_t* buffer) {
    // One buffer for every connection: the loop is single-threaded and OnRead
    // copies what it got before the next read. A connection past its hello
    // reads no more than its allowance (a connection before it is refused
    // above max_unauthenticated_bytes, unread).
    auto* connection = static_cast<Connection*>(handle->data);
    auto* self = connection->server;
    size_t room = self->read_chunk_.size();
    if (connection->hello == HelloState::kReady) {
      const size_t allowance = InputAllowance(connection);
      const size_t held = connection->input.buffered_bytes();
      room = std::min(room, allowance > held ? allowance - held : 0);
    }
    *buffer = uv_buf_init(self->read_chunk_.data(), static_cast<unsigned>(room));
  }

  static void OnRead(uv_stream_t* stream, ssize_t bytes_read, const uv_buf_t* buffer) {
    auto* connection = static_cast<Connection*>(stream->data);
    TcpStoreServerImpl* self = connection->server;
    if (bytes_read == UV_ENOBUFS) {  // its allowance is full: stop reading
      self->UpdateReading(connection);
      return;
    }
    if (bytes_read < 0) {  // EOF or a broken connection
      self->Close(connection);
      self->Pump();
      return;
    }
    if (bytes_read == 0 || connection->refusing || connection->closing) return;
    self->Receive(connection, buffer->base, static_cast<size_t>(bytes_read));
    self->Pump();
  }

  void Receive(Connection* connection, const char* bytes, size_t count) {
    if (connection->hello != HelloState::kReady &&
        connection->input.buffered_bytes() + count > options_.max_unauthenticated_bytes) {
      // Not even copied: a stranger gets a few KiB of this server, no more.
      Refuse(connection, "more than " + std::to_string(options_.max_unauthenticated_bytes) +
                             " bytes before the hello was accepted");
      return;
    }
    connection->input.Append(bytes, count);
    CountInput(connection);
    connection->last_activity = Now();
    MarkReady(connection);
  }

  void CountInput(Connection* connection) {
    const size_t held = connection->input.buffered_bytes();
    input_bytes_ = input_bytes_ - connection->counted_input_bytes + held;
    connection->counted_input_bytes = held;
  }

  bool CanServe(const Connection* connection) const {
    return !connection->closing && !connection->refusing && !connection->waiting &&
           connection->unsent_bytes <=
               (OverBudget() ? kMaxUnsentBytesOverBudget : kMaxUnsentBytesPerConnection);
  }

  void MarkReady(Connection* connection) {
    if (connection->ready || connection->closing) return;
    connection->ready = true;
    ready_.push_back(connection);
  }

  // Delivers the table's answers and serves every connection that became
  // ready, until none is left; then admits what the budget holds. Re-entry
  // (from a callback inside) only adds work to the queues that the outer
  // call drains.
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
    AdmitQueued();
    pumping_ = false;
    ArmDeadlineTimer();
    GiveBackFreedMemory();
    PublishCounters();
  }

  void PublishCounters() {
    num_keys_.store(table_.num_keys(), std::memory_order_relaxed);
    num_waiters_.store(table_.num_waiters(), std::memory_order_relaxed);
    buffered_bytes_published_.store(input_bytes_ + unsent_bytes_, std::memory_order_relaxed);
    charged_bytes_published_.store(Charged(), std::memory_order_relaxed);
    stored_bytes_published_.store(table_.stored_bytes(), std::memory_order_relaxed);
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
  // its replies pile up, its next request waits for admission, or no whole
  // frame is left.
  void Serve(Connection* connection) {
    while (CanServe(connection)) {
      const bool ready = connection->hello == HelloState::kReady;
      const size_t limit = ready ? options_.max_message_bytes : options_.max_unauthenticated_bytes;
      std::string_view body;
      const auto status = connection->input.Next(limit, &body);
      if (status == wire::FrameParser::Status::kNeedMore) {
        if (ready) Admit(connection);
        break;
      }
      if (status == wire::FrameParser::Status::kTooLarge) {
        Refuse(connection, TooLargeText(connection));
        return;
      }
      if (ready) {
        HandleRequest(connection, body);
        ReleaseAdmission(connection);
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

  // ---- admission ----

  // The size of the connection's next frame (header included) once its
  // header arrived, else 0.
  static size_t NextFrameBytes(const Connection* connection) {
    if (connection->input.buffered_bytes() < wire::kFrameHeaderBytes) return 0;
    return wire::kFrameHeaderBytes + connection->input.announced_body_bytes();
  }

  // The connection's next frame is not whole: one larger than its uncharged
  // input waits for admission (in the queue) unless it has it.
  void Admit(Connection* connection) {
    const size_t frame = NextFrameBytes(connection);
    if (frame <= kUnchargedInputBytes || connection->admitted_bytes > 0 || connection->queued) {
      return;
    }
    connection->queued = true;
    admission_queue_.push_back(connection->id);
    AdmitQueued();
  }

  // Admits waiting frames, oldest first, while the budget holds each whole.
  void AdmitQueued() {
    while (!admission_queue_.empty()) {
      const auto found = connections_.find(admission_queue_.front());
      if (found == connections_.end() || !found->second->queued) {
        admission_queue_.pop_front();  // left, or refused, meanwhile
        continue;
      }
      Connection* connection = found->second;
      const size_t frame = NextFrameBytes(connection);
      const size_t charged = Charged();
      if (charged > options_.max_buffered_bytes || frame > options_.max_buffered_bytes - charged) {
        return;
      }
      admission_queue_.pop_front();
      connection->queued = false;
      connection->admitted_bytes = frame;
      admitted_bytes_ += frame;
      // Room for all of it now, so that the buffer never doubles past it.
      connection->input.Reserve(frame + kUnchargedInputBytes);
      connection->last_activity = Now();  // the stall clock starts now
      UpdateReading(connection);
    }
  }

  void ReleaseAdmission(Connection* connection) {
    admitted_bytes_ -= connection->admitted_bytes;
    connection->admitted_bytes = 0;
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
    if (connection->closing || connection->refusing || connection->queued) return false;
    if (connection->hello != HelloState::kReady) return true;
    return connection->input.buffered_bytes() < InputAllowance(connection);
  }

  // Reads when it may; a connection that is not read is watched for its
  // peer's close instead.
  void UpdateReading(Connection* connection) {
    if (connection->closing || connection->refusing) return;
    const bool want = WantsToRead(connection);
    if (want != connection->reading) {
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
    if (want) {
      Unwatch(connection);
    } else {
      Watch(connection);
    }
  }

  // ---- hang-ups of connections that are not read ----

  void Watch(Connection* connection) {
    if (connection->watched) return;
    uv_os_fd_t fd = -1;
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0) return;
    epoll_event event{};
    event.events = EPOLLRDHUP;  // and EPOLLERR, EPOLLHUP, always reported
    event.data.u64 = connection->id;
    if (epoll_ctl(hangup_fd_, EPOLL_CTL_ADD, fd, &event) == 0) connection->watched = true;
  }

  void Unwatch(Connection* connection) {
    if (!connection->watched) return;
    connection->watched = false;
    uv_os_fd_t fd = -1;
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0) return;
    epoll_ctl(hangup_fd_, EPOLL_CTL_DEL, fd, nullptr);
  }

  static void OnHangup(uv_poll_t* poll, int /*status*/, int /*events*/) {
    auto* self = static_cast<TcpStoreServerImpl*>(poll->data);
    epoll_event events[64];
    int count = 0;
    while ((count = epoll_wait(self->hangup_fd_, events, 64, 0)) > 0) {
      for (int i = 0; i < count; ++i) {
        const ClientId id = events[i].data.u64;  // a copy: epoll_event is packed
        const auto found = self->connections_.find(id);
        if (found != self->connections_.end()) self->Close(found->second);
      }
      if (count < 64) break;
    }
    self->Pump();
  }

  // ---- writing ----

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
    write->charge = write->reply.head.size();
    if (uv_write(&write->request, Stream(connection), buffers, count, OnWritten) != 0) {
      delete write;
      Close(connection);
      return;
    }
    connection->unsent_bytes += bytes;
    unsent_bytes_ += bytes;
    reply_charge_ += write->charge;
  }

  static void OnWritten(uv_write_t* request, int status) {
    auto* connection = static_cast<Connection*>(request->handle->data);
    auto* write = reinterpret_cast<WriteRequest*>(request);
    TcpStoreServerImpl* self = connection->server;
    const size_t bytes = write->reply.size();
    self->reply_charge_ -= write->charge;
    delete write;
    connection->unsent_bytes -= bytes;
    self->unsent_bytes_ -= bytes;
    if (connection->closing) {
      // Cancelled by the close; what it held is free for the others.
    } else if (status < 0) {
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
    connection->queued = false;
    ReleaseAdmission(connection);
    Unwatch(connection);
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
    TcpStoreServerImpl* self = connection->server;
    self->Close(connection);
    self->Pump();
  }

  void Close(Connection* connection) {
    if (connection->closing) return;
    if (connection->hello == HelloState::kAwaitProof && !connection->refusing &&
        !connection->shed) {
      // A client that would not answer the challenge (it had no token).
      num_refused_hellos_.fetch_add(1, std::memory_order_relaxed);
    }
    connection->closing = true;
    connection->queued = false;
    ReleaseAdmission(connection);
    Unwatch(connection);
    Unlist(connection);
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
      // A ticket in the nonce: a holder of the token, never shed for strangers.
      if (auth::NonceCarriesTicket(options_.token, client_nonce)) Unlist(connection);
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
    Unlist(connection);
    EnableKeepalive(connection);
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
    connection->waiting = !table_.Handle(connection->id, std::move(request), Now());
  }

  // ---- memory ----

  // Large values and frames are mapped and unmapped by malloc itself; the
  // many small blocks of keys and waiters stay with the process after they
  // are freed unless they are given back.
  void GiveBackFreedMemory() {
    const size_t held = table_.stored_bytes() + table_.waiter_bytes() + admitted_bytes_;
    trim_high_water_ = std::max(trim_high_water_, held);
    if (trim_high_water_ - held < kTrimAfterFreedBytes) return;
    trim_high_water_ = held;
#ifdef __GLIBC__
    malloc_trim(0);
#endif
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

  // Closes connections that never finished their hello, idle ones, and
  // those whose admitted request stopped arriving.
  static void OnSweep(uv_timer_t* timer) {
    auto* self = static_cast<TcpStoreServerImpl*>(timer->data);
    self->ReadDescriptorLimit();
    const Milliseconds now = self->Now();
    const Milliseconds hello_ms = self->options_.hello_timeout.count();
    const Milliseconds idle_ms = self->options_.idle_timeout.count();
    const Milliseconds stalled_ms = self->options_.stalled_request_timeout.count();
    std::vector<Connection*> expired;
    std::vector<Connection*> stalled;
    for (const auto& [id, connection] : self->connections_) {
      const Milliseconds quiet = now - connection->last_activity;
      const bool hello_late =
          connection->hello != HelloState::kReady && now - connection->accepted_at >= hello_ms;
      const bool idle = connection->hello == HelloState::kReady && idle_ms > 0 &&
                        !connection->waiting && !connection->queued && quiet >= idle_ms;
      const bool refusal_stuck = connection->refusing && quiet >= hello_ms;
      if (hello_late || idle || refusal_stuck) {
        expired.push_back(connection);
      } else if (connection->admitted_bytes > 0 && !connection->refusing &&
                 connection->input.buffered_bytes() < connection->admitted_bytes &&
                 quiet >= stalled_ms) {
        stalled.push_back(connection);
      }
    }
    for (Connection* connection : expired) self->Close(connection);
    for (Connection* connection : stalled) {
      self->Refuse(connection, "request of " + std::to_string(connection->admitted_bytes) +
                                   " bytes stalled: none of it arrived for " +
                                   std::to_string(stalled_ms) +
                                   " ms (the store's stalled_request_timeout)");
    }
    if (!expired.empty() || !stalled.empty()) self->Pump();
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
  uv_check_t turn_check_{};
  uv_poll_t hangup_poll_{};
  int hangup_fd_ = -1;                      // epoll set of the connections not being read
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
  std::deque<ClientId> admission_queue_;
  // Connections that may be shed, oldest first: in all, and per peer.
  std::list<Connection*> unauthenticated_;
  std::unordered_map<std::string, std::list<Connection*>> unauthenticated_by_peer_;
  unsigned accepted_this_turn_ = 0;
  bool accept_deferred_ = false;
  size_t descriptor_limit_ = 0;
  size_t descriptor_reserve_ = 16;
  bool pumping_ = false;
  size_t input_bytes_ = 0;     // received, not yet handled
  size_t unsent_bytes_ = 0;    // replies not yet written, values included
  size_t admitted_bytes_ = 0;  // admitted frames, whole (charged)
  size_t reply_charge_ = 0;    // unsent replies less shared values (charged)
  size_t trim_high_water_ = 0;
  std::vector<char> read_chunk_;

  std::atomic<size_t> num_keys_{0};
  std::atomic<size_t> num_waiters_{0};
  std::atomic<size_t> num_connections_{0};
  std::atomic<size_t> num_refused_hellos_{0};
  std::atomic<size_t> num_shed_{0};
  std::atomic<size_t> buffered_bytes_published_{0};
  std::atomic<size_t> charged_bytes_published_{0};
  std::atomic<size_t> stored_bytes_published_{0};
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
