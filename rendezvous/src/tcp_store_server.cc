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
//
// The pieces: tcp_store_server_impl.h names them.

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hello_auth.h"
#include "infini/common/one_line.h"
#include "infini/rendezvous/endpoint.h"
#include "infini/rendezvous/tcp_store.h"
#include "key_value_table.h"
#include "relay_server.h"
#include "request_codec.h"
#include "tcp_store_server_impl.h"
#include "wire_protocol.h"

namespace infini::rendezvous {
namespace store_server {
namespace {

// Free memory given back to the system (malloc_trim) once this much of what
// the store held (keys, values, waiters, requests) was freed.
constexpr size_t kTrimAfterFreedBytes = size_t{32} << 20;

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
  if (options.max_unsent_bytes_per_connection == 0) {
    refuse("max_unsent_bytes_per_connection=0: expected at least 1");
  }
  if (options.upstream && options.upstream->longest_watch.count() <= 0) {
    refuse("upstream.longest_watch: expected a positive duration");
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

HelloTerms TermsOf(const TcpStoreServerOptions& options) {
  return {.token = options.token,
          .max_message_bytes = options.max_message_bytes,
          .max_keys_per_request = options.max_keys_per_request};
}

}  // namespace

TcpStoreServerImpl::TcpStoreServerImpl(const TcpStoreServerOptions& options)
    : options_(options),
      table_(LimitsOf(options)),
      replies_([this](Connection* connection, int status) { OnReplyWritten(connection, status); }),
      admission_(options.max_buffered_bytes),
      acceptor_(*this, options.max_unauthenticated_connections,
                options.max_unauthenticated_per_peer),
      hello_stage_(*this, acceptor_, TermsOf(options)),
      reader_(*this, options.max_unauthenticated_bytes) {
  limits_.max_keys_per_request = options_.max_keys_per_request;
}

TcpStoreServerImpl::~TcpStoreServerImpl() {
  StopServing();
  if (loop_initialized_) {
    const int result = uv_loop_close(&loop_);
    if (result != 0)
      std::fprintf(stderr, "store server: loop not closed: %s\n", uv_strerror(result));
  }
}

void TcpStoreServerImpl::StopServing() {
  if (thread_.joinable()) {
    uv_async_send(&stop_async_);
    thread_.join();
  }
  // Every handle is closed by OnStop (or by the failed Start); run the
  // close callbacks that are still due.
  if (loop_initialized_) uv_run(&loop_, UV_RUN_DEFAULT);
}

// ---- set-up ----

void TcpStoreServerImpl::CheckUv(int result, const std::string& where, const char* what) {
  if (result == 0) return;
  CloseServerHandles();
  throw StoreError("store server on " + where + " " + what + ": " + uv_strerror(result));
}

void TcpStoreServerImpl::CloseServerHandles() {
  for (uv_handle_t* handle : open_handles_) uv_close(handle, nullptr);
  open_handles_.clear();
}

void TcpStoreServerImpl::ResolveBindAddress(const std::string& where, sockaddr_storage* address) {
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

uint64_t TcpStoreServerImpl::SweepIntervalMs() const {
  auto shortest = std::min(options_.hello_timeout, options_.stalled_request_timeout);
  if (options_.idle_timeout.count() > 0) shortest = std::min(shortest, options_.idle_timeout);
  return static_cast<uint64_t>(std::clamp<int64_t>(shortest.count() / 4, 10, 1000));
}

// Binds and listens; throws StoreError naming host:port on failure.
void TcpStoreServerImpl::Listen() {
  const std::string where = OneLine(FormatEndpoint({options_.host, options_.port}));
  CheckUv(uv_loop_init(&loop_), where, "could not create its event loop");
  loop_initialized_ = true;
  sockaddr_storage address{};
  ResolveBindAddress(where, &address);
  const std::string listen_failed = acceptor_.Listen(&loop_, address, &open_handles_);
  if (!listen_failed.empty()) {
    CloseServerHandles();
    throw StoreError("store server on " + where + " " + listen_failed);
  }
  acceptor_.set_endpoint(FormatEndpoint({options_.host, acceptor_.port()}));
  InitHandle(uv_timer_init(&loop_, &deadline_timer_), &deadline_timer_, where);
  InitHandle(uv_timer_init(&loop_, &sweep_timer_), &sweep_timer_, where);
  InitHandle(uv_async_init(&loop_, &stop_async_, OnStop), &stop_async_, where);
  if (const std::string failed = reader_.Start(&loop_, &open_handles_); !failed.empty()) {
    CloseServerHandles();
    throw StoreError("store server on " + where + " " + failed);
  }
  const auto interval = SweepIntervalMs();
  uv_timer_start(&sweep_timer_, OnSweep, interval, interval);
  StartUpstream(where);
}

void TcpStoreServerImpl::StartThread() {
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

// ---- the loop ----

// Delivers the table's answers and serves every connection that became
// ready, until none is left; then admits what the budget holds. Re-entry
// (from a callback inside) only adds work to the queues that the outer
// call drains.
void TcpStoreServerImpl::Pump() {
  if (pumping_) return;
  pumping_ = true;
  DeliverCompletions();
  while (!ready_.empty()) {
    Connection* connection = ready_.front();
    ready_.pop_front();
    connection->in_ready_queue = false;
    if (!connection->closing()) Serve(connection);
  }
  AdmitQueued();
  pumping_ = false;
  ArmDeadlineTimer();
  GiveBackFreedMemory();
  PublishCounters();
}

void TcpStoreServerImpl::PublishCounters() {
  num_keys_.store(table_.num_keys(), std::memory_order_relaxed);
  num_waiters_.store(table_.num_waiters(), std::memory_order_relaxed);
  buffered_bytes_published_.store(reader_.input_bytes() + replies_.unsent_bytes(),
                                  std::memory_order_relaxed);
  charged_bytes_published_.store(Charged(), std::memory_order_relaxed);
  stored_bytes_published_.store(table_.stored_bytes(), std::memory_order_relaxed);
}

void TcpStoreServerImpl::DeliverCompletions() {
  if (!table_.HasCompletions()) {
    SendBatchReplies();  // batches handled with nothing answered yet are told so
    return;
  }
  // Counters change before the replies leave (uv_write may send at once),
  // so a client that got its answer sees them settled.
  PublishCounters();
  for (Completion& completion : table_.TakeCompletions()) {
    if (RouteBatchReply(completion)) continue;
    const auto found = connections_.find(completion.client);
    if (found == connections_.end() || found->second->closing()) continue;
    Connection* connection = found->second;
    Send(connection, wire::EncodeReply(completion.reply));
    if (connection->state == ConnectionState::kWaiting && !table_.IsWaiting(connection->id)) {
      connection->state = ConnectionState::kServing;
      MarkReady(connection);
    }
  }
  SendBatchReplies();
}

// ---- memory ----

// Large values and frames are mapped and unmapped by malloc itself; the
// many small blocks of keys and waiters stay with the process after they
// are freed unless they are given back.
void TcpStoreServerImpl::GiveBackFreedMemory() {
  const size_t held = table_.stored_bytes() + table_.waiter_bytes() + admission_.admitted_bytes();
  trim_high_water_ = std::max(trim_high_water_, held);
  if (trim_high_water_ - held < kTrimAfterFreedBytes) return;
  trim_high_water_ = held;
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

// ---- timers ----

void TcpStoreServerImpl::ArmDeadlineTimer() {
  if (stopping_) return;
  const Milliseconds next = table_.NextDeadline();
  if (next < 0) {
    uv_timer_stop(&deadline_timer_);
    return;
  }
  uv_timer_start(&deadline_timer_, OnDeadline,
                 static_cast<uint64_t>(std::max<Milliseconds>(next - Now(), 0)), 0);
}

void TcpStoreServerImpl::OnDeadline(uv_timer_t* timer) {
  auto* self = static_cast<TcpStoreServerImpl*>(timer->data);
  self->table_.ExpireWaiters(self->Now());
  self->Pump();
}

// Closes connections that never finished their hello, idle ones, and
// those whose admitted request stopped arriving.
void TcpStoreServerImpl::OnSweep(uv_timer_t* timer) {
  auto* self = static_cast<TcpStoreServerImpl*>(timer->data);
  self->acceptor_.ReadDescriptorLimit();
  const Milliseconds now = self->Now();
  const Milliseconds hello_ms = self->options_.hello_timeout.count();
  const Milliseconds idle_ms = self->options_.idle_timeout.count();
  const Milliseconds stalled_ms = self->options_.stalled_request_timeout.count();
  std::vector<Connection*> expired;
  std::vector<Connection*> stalled;
  for (const auto& [id, connection] : self->connections_) {
    const Milliseconds quiet = now - connection->last_activity;
    const ConnectionState state = connection->state;
    const bool hello_late =
        state == ConnectionState::kHello && now - connection->accepted_at >= hello_ms;
    const bool idle = state == ConnectionState::kServing && idle_ms > 0 &&
                      connection->batch_waiters.empty() &&
                      connection->on_close.empty() &&  // its close would set them
                      quiet >= idle_ms;
    const bool refusal_stuck = state == ConnectionState::kRefusing && quiet >= hello_ms;
    if (hello_late || idle || refusal_stuck) {
      expired.push_back(connection);
    } else if (connection->admitted_bytes > 0 && state != ConnectionState::kRefusing &&
               state != ConnectionState::kForwarded &&  // whole, charged until written upstream
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

void TcpStoreServerImpl::OnStop(uv_async_t* async) {
  auto* self = static_cast<TcpStoreServerImpl*>(async->data);
  self->stopping_ = true;
  self->acceptor_.Stop();
  std::vector<Connection*> open;
  for (const auto& [id, connection] : self->connections_) open.push_back(connection);
  for (Connection* connection : open) self->Close(connection);
  self->CloseServerHandles();
}
}  // namespace store_server

std::unique_ptr<TcpStoreServer> TcpStoreServer::Start(const TcpStoreServerOptions& options) {
  store_server::CheckOptions(options);
  std::unique_ptr<store_server::TcpStoreServerImpl> server;
  if (options.upstream) {
    server = std::make_unique<store_server::RelayServer>(options);
  } else {
    server = std::make_unique<store_server::TcpStoreServerImpl>(options);
  }
  server->Listen();
  server->StartThread();
  return server;
}

}  // namespace infini::rendezvous
