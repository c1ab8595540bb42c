// The store server's front door (acceptor.h): the listening socket's
// connections accepted a few per loop turn, strangers shed for the caps and
// the descriptor reserve.

#include "acceptor.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <uv.h>

#include <cstdio>
#include <string>

namespace infini::rendezvous::store_server {
namespace {

// Connections accepted per loop turn; the rest wait in the kernel's queue
// until the connections already open were served.
constexpr unsigned kAcceptsPerTurn = 16;

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

std::string Acceptor::Listen(uv_loop_t* loop, const sockaddr_storage& address,
                             std::vector<uv_handle_t*>* open_handles) {
  loop_ = loop;
  const auto failed = [](const char* what, int result) {
    return std::string(what) + ": " + uv_strerror(result);
  };
  if (const int result = uv_tcp_init(loop, &listener_); result != 0) {
    return failed("could not create a libuv handle", result);
  }
  listener_.data = this;
  open_handles->push_back(reinterpret_cast<uv_handle_t*>(&listener_));
  if (const int result = uv_tcp_bind(&listener_, reinterpret_cast<const sockaddr*>(&address), 0);
      result != 0) {
    return failed("could not bind", result);
  }
  // libuv sets SO_REUSEADDR on bind, so a restarted launcher rebinds at once.
  if (const int result =
          uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), SOMAXCONN, OnConnection);
      result != 0) {
    return failed("could not listen", result);
  }
  sockaddr_storage bound{};
  int bound_length = sizeof(bound);
  if (const int result =
          uv_tcp_getsockname(&listener_, reinterpret_cast<sockaddr*>(&bound), &bound_length);
      result != 0) {
    return failed("could not read its port", result);
  }
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (const int result = uv_check_init(loop, &turn_check_); result != 0) {
    return failed("could not create a libuv handle", result);
  }
  turn_check_.data = this;
  open_handles->push_back(reinterpret_cast<uv_handle_t*>(&turn_check_));
  uv_check_start(&turn_check_, OnTurnEnd);
  descriptors_.Read();
  return "";
}

void Acceptor::OnConnection(uv_stream_t* listener, int status) {
  auto* self = static_cast<Acceptor*>(listener->data);
  if (self->stopping_) return;
  if (status < 0) {
    // Out of descriptors: libuv took and closed what waited. Strangers
    // make room for the next ones.
    self->WarnIfNearDescriptorLimit(nullptr, status);
    if (status == UV_EMFILE || status == UV_ENFILE) {
      for (int i = 0; i < 16 && !self->strangers_.empty(); ++i) {
        self->Shed(self->strangers_.oldest());
      }
      self->owner_.PumpReady();
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
void Acceptor::OnTurnEnd(uv_check_t* check) {
  auto* self = static_cast<Acceptor*>(check->data);
  self->accepted_this_turn_ = 0;
  if (self->accept_deferred_ && !self->stopping_) {
    self->accept_deferred_ = false;
    self->AcceptOne();
  }
}

void Acceptor::AcceptOne() {
  ++accepted_this_turn_;
  Connection* connection = owner_.OpenConnection();
  if (connection == nullptr) return;
  if (uv_accept(reinterpret_cast<uv_stream_t*>(&listener_),
                reinterpret_cast<uv_stream_t*>(&connection->handle)) != 0) {
    owner_.CloseConnection(connection, /*shed=*/false);
    return;
  }
  connection->accepted_at = connection->last_activity = Now();
  WarnIfNearDescriptorLimit(connection, 0);
  uv_tcp_nodelay(&connection->handle, 1);
  strangers_.Add(connection->id, PeerKey(&connection->handle), connection->accepted_at);
  MakeRoomFor(connection);
  owner_.Welcome(connection);
}

// ---- strangers ----

// Closes the oldest other unauthenticated connections beyond the caps,
// and one when the descriptors are near the process's limit.
void Acceptor::MakeRoomFor(Connection* connection) {
  while (const ClientId beyond = strangers_.NextBeyondCaps(connection->id)) Shed(beyond);
  uv_os_fd_t fd = -1;
  if (descriptors_.limit() == 0 ||
      uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0 ||
      !descriptors_.InReserve(static_cast<size_t>(fd))) {
    return;
  }
  if (const ClientId oldest = strangers_.OldestToShedForDescriptors(connection->id, Now())) {
    WarnAboutDescriptors(/*reached=*/false);
    Shed(oldest);
  }
}

void Acceptor::Shed(ClientId id) {
  num_shed_.fetch_add(1, std::memory_order_relaxed);
  Connection* connection = owner_.FindConnection(id);
  strangers_.Remove(id);  // gone from the list whatever the owner does
  if (connection != nullptr) owner_.CloseConnection(connection, /*shed=*/true);
}

// Past the process's open-file limit, libuv accepts and at once closes the
// connections it has no descriptor for (so that the loop does not spin),
// and the clients see a closed connection. Said before that happens (a
// connection's descriptor at 90 % of the limit, or strangers shed to keep
// the reserve: descriptors are handed out lowest first) and when it does,
// once a minute at most, naming the limit.
void Acceptor::WarnIfNearDescriptorLimit(Connection* accepted, int status) {
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

void Acceptor::WarnAboutDescriptors(bool reached) {
  if (!descriptors_.ShouldWarn(Now())) return;
  std::fprintf(stderr,
               "store at %s: %zu connections %s the open-file soft limit %zu; raise it "
               "(ulimit -n) on the host of the store\n",
               endpoint_.c_str(), owner_.open_connections(), reached ? "have reached" : "are near",
               descriptors_.limit());
}

}  // namespace infini::rendezvous::store_server
