// The store server's front door: the listening socket's connections accepted
// a few per loop turn, strangers (connections before their hello) shed for
// the caps and the descriptor reserve, keepalive for the accepted, and the
// hello itself (ServerHandshake decides; this sends and refuses).

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <uv.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include "infini/rendezvous/endpoint.h"
#include "server_handshake.h"
#include "strangers.h"
#include "tcp_store_server_impl.h"
#include "wire_protocol.h"

namespace infini::rendezvous::store_server {
namespace {

// Connections accepted per loop turn; the rest wait in the kernel's queue
// until the connections already open were served.
constexpr unsigned kAcceptsPerTurn = 16;
// Keepalive probes find a peer that vanished without a FIN (a half-open
// connection) while its request waits: 30 s quiet, then 3 probes 10 s apart.
constexpr int kKeepaliveIdleSeconds = 30;
constexpr int kKeepaliveIntervalSeconds = 10;
constexpr int kKeepaliveProbes = 3;

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

}  // namespace

void TcpStoreServerImpl::OnConnection(uv_stream_t* listener, int status) {
  auto* self = static_cast<TcpStoreServerImpl*>(listener->data);
  if (self->stopping_) return;
  if (status < 0) {
    // Out of descriptors: libuv took and closed what waited. Strangers
    // make room for the next ones.
    self->WarnIfNearDescriptorLimit(nullptr, status);
    if (status == UV_EMFILE || status == UV_ENFILE) {
      for (int i = 0; i < 16 && !self->strangers_.empty(); ++i) {
        self->Shed(self->connections_.at(self->strangers_.oldest()));
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
void TcpStoreServerImpl::OnTurnEnd(uv_check_t* check) {
  auto* self = static_cast<TcpStoreServerImpl*>(check->data);
  self->accepted_this_turn_ = 0;
  if (self->accept_deferred_ && !self->stopping_) {
    self->accept_deferred_ = false;
    self->AcceptOne();
  }
}

void TcpStoreServerImpl::AcceptOne() {
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
  strangers_.Add(connection->id, PeerKey(&connection->handle), connection->accepted_at);
  MakeRoomFor(connection);
  ReadWhatArrived(connection);
  UpdateReading(connection);
  Pump();
}

// The hello that the client sent right after connecting is usually there
// by the time it is accepted: read it now, so that a client holding the
// token is known before any other connection can push it out.
void TcpStoreServerImpl::ReadWhatArrived(Connection* connection) {
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

// Closes the oldest other unauthenticated connections beyond the caps,
// and one when the descriptors are near the process's limit.
void TcpStoreServerImpl::MakeRoomFor(Connection* connection) {
  while (const ClientId beyond = strangers_.NextBeyondCaps(connection->id)) {
    Shed(connections_.at(beyond));
  }
  uv_os_fd_t fd = -1;
  if (descriptors_.limit() == 0 ||
      uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0 ||
      !descriptors_.InReserve(static_cast<size_t>(fd))) {
    return;
  }
  if (const ClientId oldest = strangers_.OldestToShedForDescriptors(connection->id, Now())) {
    WarnAboutDescriptors(/*reached=*/false);
    Shed(connections_.at(oldest));
  }
}

void TcpStoreServerImpl::Shed(Connection* connection) {
  num_shed_.fetch_add(1, std::memory_order_relaxed);
  Close(connection, /*shed=*/true);
}

// Past the process's open-file limit, libuv accepts and at once closes the
// connections it has no descriptor for (so that the loop does not spin),
// and the clients see a closed connection. Said before that happens (a
// connection's descriptor at 90 % of the limit, or strangers shed to keep
// the reserve: descriptors are handed out lowest first) and when it does,
// once a minute at most, naming the limit.
void TcpStoreServerImpl::WarnIfNearDescriptorLimit(Connection* accepted, int status) {
  if (descriptors_.limit() == 0) return;
  const bool out = status == UV_EMFILE || status == UV_ENFILE;
  uv_os_fd_t fd = -1;
  if (!out && (accepted == nullptr ||
               uv_fileno(reinterpret_cast<uv_handle_t*>(&accepted->handle), &fd) != 0 ||
               !descriptors_.Near(static_cast<size_t>(fd)))) {
    return;
  }
  WarnAboutDescriptors(out);
}

void TcpStoreServerImpl::WarnAboutDescriptors(bool reached) {
  if (!descriptors_.ShouldWarn(Now())) return;
  std::fprintf(stderr,
               "store at %s: %zu connections %s the open-file soft limit %zu; raise it "
               "(ulimit -n) on the host of the store\n",
               FormatEndpoint({options_.host, port_}).c_str(), connections_.size(),
               reached ? "have reached" : "are near", descriptors_.limit());
}

void TcpStoreServerImpl::EnableKeepalive(Connection* connection) {
  uv_tcp_keepalive(&connection->handle, 1, kKeepaliveIdleSeconds);
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0) return;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepaliveIntervalSeconds,
               sizeof(kKeepaliveIntervalSeconds));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepaliveProbes, sizeof(kKeepaliveProbes));
}

// ---- hello ----

void TcpStoreServerImpl::HandleHello(Connection* connection, std::string_view body) {
  ServerHandshake::Step step = connection->hello.Next(body, hello_terms_);
  // A holder of the token is never shed for strangers, even while refused.
  if (step.holds_ticket || connection->hello.ready()) strangers_.Remove(connection->id);
  if (!step.refusal.empty()) {
    Refuse(connection, step.refusal);
    return;
  }
  if (connection->hello.ready()) {
    connection->state = ConnectionState::kServing;
    EnableKeepalive(connection);
  }
  Send(connection, wire::EncodedReply{std::move(step.reply), {}, {}});
}

}  // namespace infini::rendezvous::store_server
