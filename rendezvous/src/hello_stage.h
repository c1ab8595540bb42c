// A new connection's way in: each frame before its hello was accepted goes
// to its ServerHandshake (which knows no sockets); this sends the step's
// answer or refuses the connection, makes an accepted one kServing with
// keepalive on, tells the Acceptor that a holder of the token is no
// stranger, and counts the hellos refused.
#pragma once

#include <atomic>
#include <cstddef>
#include <string_view>
#include <utility>

#include "acceptor.h"
#include "connection.h"
#include "connection_owner.h"
#include "server_handshake.h"

namespace infini::rendezvous::store_server {

class HelloStage {
 public:
  HelloStage(ConnectionOwner& owner, Acceptor& acceptor, HelloTerms terms)
      : owner_(owner), acceptor_(acceptor), terms_(std::move(terms)) {}

  // One frame of `connection`'s hello.
  void Take(Connection* connection, std::string_view body);

  // The connection is being refused (counted when its hello was not accepted).
  void Refusing(const Connection* connection);
  // The connection is closing (counted when it would not answer the
  // challenge: it had no token), unless `shed` or already refused.
  void Closing(const Connection* connection, bool shed);

  size_t num_refused() const { return num_refused_.load(std::memory_order_relaxed); }

 private:
  static void EnableKeepalive(Connection* connection);

  ConnectionOwner& owner_;
  Acceptor& acceptor_;
  const HelloTerms terms_;
  std::atomic<size_t> num_refused_{0};
};

}  // namespace infini::rendezvous::store_server
