// Hang-ups of the connections that are not read (hangup_watch.h).

#include "hangup_watch.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace infini::rendezvous::store_server {

HangupWatch::~HangupWatch() {
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

std::string HangupWatch::Start(uv_loop_t* loop, std::vector<uv_handle_t*>* open_handles) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0)
    return std::string("could not create an epoll instance: ") + std::strerror(errno);
  if (const int result = uv_poll_init(loop, &poll_, epoll_fd_); result != 0) {
    return std::string("could not create a libuv handle: ") + uv_strerror(result);
  }
  poll_.data = this;
  open_handles->push_back(reinterpret_cast<uv_handle_t*>(&poll_));
  uv_poll_start(&poll_, UV_READABLE, OnHangup);
  return "";
}

void HangupWatch::Watch(Connection* connection) {
  if (connection->in_hangup_set) return;
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0) return;
  epoll_event event{};
  event.events = EPOLLRDHUP;  // and EPOLLERR, EPOLLHUP, always reported
  event.data.u64 = connection->id;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) == 0) connection->in_hangup_set = true;
}

void HangupWatch::Unwatch(Connection* connection) {
  if (!connection->in_hangup_set) return;
  connection->in_hangup_set = false;
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) != 0) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

void HangupWatch::OnHangup(uv_poll_t* poll, int /*status*/, int /*events*/) {
  auto* self = static_cast<HangupWatch*>(poll->data);
  epoll_event events[64];
  int count = 0;
  while ((count = epoll_wait(self->epoll_fd_, events, 64, 0)) > 0) {
    for (int i = 0; i < count; ++i) {
      const ClientId id = events[i].data.u64;  // a copy: epoll_event is packed
      if (Connection* connection = self->owner_.FindConnection(id)) {
        self->owner_.CloseConnection(connection, /*shed=*/false);
      }
    }
    if (count < 64) break;
  }
  self->owner_.PumpReady();
}

}  // namespace infini::rendezvous::store_server
