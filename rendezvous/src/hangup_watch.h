// The peers' closes of the connections that are not being read (waiting for
// admission, or their input allowance full): a second epoll instance, which
// the loop polls, holds them, so a client that leaves is noticed at once
// and its connection closed through the ConnectionOwner.
#pragma once

#include <uv.h>

#include <string>
#include <vector>

#include "connection.h"
#include "connection_owner.h"

namespace infini::rendezvous::store_server {

class HangupWatch {
 public:
  explicit HangupWatch(ConnectionOwner& owner) : owner_(owner) {}
  ~HangupWatch();
  HangupWatch(const HangupWatch&) = delete;
  HangupWatch& operator=(const HangupWatch&) = delete;

  // Polls its epoll set on `loop`; its handle is added to `open_handles`.
  // Returns "" or what failed.
  std::string Start(uv_loop_t* loop, std::vector<uv_handle_t*>* open_handles);

  void Watch(Connection* connection);
  void Unwatch(Connection* connection);

 private:
  static void OnHangup(uv_poll_t* poll, int status, int events);

  ConnectionOwner& owner_;
  int epoll_fd_ = -1;
  uv_poll_t poll_{};
};

}  // namespace infini::rendezvous::store_server
