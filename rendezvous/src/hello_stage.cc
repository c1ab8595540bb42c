// A new connection's way in (hello_stage.h).

#include "hello_stage.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <uv.h>

#include <string>
#include <utility>

namespace infini::rendezvous::store_server {
namespace {

// Keepalive probes find a peer that vanished without a FIN (a half-open
// connection) while its request waits: 30 s quiet, then 3 probes 10 s apart.
constexpr int kKeepaliveIdleSeconds = 30;
constexpr int kKeepaliveIntervalSeconds = 10;
constexpr int kKeepaliveProbes = 3;

}  // namespace

void HelloStage::Take(Connection* connection, std::string_view body) {
  ServerHandshake::Step step = connection->hello.Next(body, terms_);
  // A holder of the token is never shed for strangers, even while refused.
  if (step.holds_ticket || connection->hello.ready()) acceptor_.NoLongerStranger(connection->id);
  if (!step.refusal.empty()) {
    owner_.RefuseConnection(connection, step.refusal);
    return;
  }
  if (connection->hello.ready()) {
    connection->state = ConnectionState::kServing;
    EnableKeepalive(connection);
  }
  owner_.SendReply(connection, wire::EncodedReply{std::move(step.reply), {}, {}});
}

void HelloStage::Refusing(const Connection* connection) {
  if (!connection->hello.ready()) num_refused_.fetch_add(1, std::memory_order_relaxed);
}

void HelloStage::Closing(const Connection* connection, bool shed) {
  if (connection->hello.state() == ServerHandshake::State::kAwaitProof &&
      connection->state != ConnectionState::kRefusing && !shed) {
    num_refused_.fetch_add(1, std::memory_order_relaxed);
  }
}

void HelloStage::EnableKeepalive(Connection* connection) {
  uv_tcp_keepalive(&connection->handle, 1, kKeepaliveIdleSeconds);
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0) return;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepaliveIntervalSeconds,
               sizeof(kKeepaliveIntervalSeconds));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepaliveProbes, sizeof(kKeepaliveProbes));
}

}  // namespace infini::rendezvous::store_server
