// The store client's transport (see client_connection.h).
#include "client_connection.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "infini/common/one_line.h"
#include "wire_protocol.h"

namespace infini::rendezvous::store_client {
namespace {

int MillisecondsLeft(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1'000'000'000));
}

std::string ErrnoText(int error) { return std::strerror(error); }

// Waits until `fd` is ready for `events` or the deadline passes (false).
bool PollUntil(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd descriptor{.fd = fd, .events = events, .revents = 0};
    const int ready = poll(&descriptor, 1, MillisecondsLeft(deadline));
    if (ready > 0) return true;  // readiness, or an error that the next call reports
    if (ready == 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) return true;
  }
}

// Connects one socket to `address`, within the deadline; returns the fd or -1
// with `error` set.
int ConnectSocket(const addrinfo& address, Clock::time_point deadline, int* error) {
  const int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          address.ai_protocol);
  if (fd < 0) {
    *error = errno;
    return -1;
  }
  if (::connect(fd, address.ai_addr, address.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      *error = errno;
      ::close(fd);
      return -1;
    }
    if (!PollUntil(fd, POLLOUT, deadline)) {
      *error = ETIMEDOUT;
      ::close(fd);
      return -1;
    }
    int socket_error = 0;
    socklen_t length = sizeof(socket_error);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &socket_error, &length) != 0) socket_error = errno;
    if (socket_error != 0) {
      *error = socket_error;
      ::close(fd);
      return -1;
    }
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  return fd;
}

}  // namespace

Connection::~Connection() { ::close(fd_); }

void Connection::SendAll(std::string_view bytes, Clock::time_point deadline) {
  while (!bytes.empty()) {
    if (!PollUntil(fd_, POLLOUT, deadline)) throw IoFailure{"it did not accept data in time"};
    const ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw IoFailure{"sending failed: " + ErrnoText(errno)};
    }
    bytes.remove_prefix(static_cast<size_t>(sent));
  }
}

void Connection::ReceiveExactly(char* bytes, size_t length, Clock::time_point deadline,
                                const std::string& late_message) {
  while (length > 0) {
    if (!PollUntil(fd_, POLLIN, deadline)) throw IoFailure{late_message};
    const ssize_t received = ::recv(fd_, bytes, length, MSG_DONTWAIT);
    if (received == 0) throw IoFailure{"the store closed the connection"};
    if (received < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw IoFailure{"receiving failed: " + ErrnoText(errno)};
    }
    bytes += received;
    length -= static_cast<size_t>(received);
  }
}

bool Connection::ClosedByPeer() {
  pollfd descriptor{.fd = fd_, .events = POLLIN, .revents = 0};
  if (::poll(&descriptor, 1, 0) <= 0) return false;
  char byte;
  const ssize_t peeked = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return peeked == 0 || (peeked < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

std::string Connection::ReceiveFrame(Clock::time_point deadline, const std::string& late_message,
                                     size_t max_body_bytes) {
  char header[wire::kFrameHeaderBytes];
  ReceiveExactly(header, sizeof(header), deadline, late_message);
  const uint32_t body_bytes = wire::DecodeU32(header);
  if (body_bytes == 0 || body_bytes > max_body_bytes) {
    throw IoFailure{"it sent a malformed reply (length " + std::to_string(body_bytes) + ")"};
  }
  std::string body(body_bytes, '\0');
  ReceiveExactly(body.data(), body.size(), deadline, late_message);
  return body;
}

int TryConnect(const std::string& host, uint16_t port, Clock::time_point deadline,
               std::string* failure) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  const int resolved = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addresses);
  if (resolved != 0) {
    *failure = std::string("cannot resolve host '") + OneLine(host) +
               "': " + (resolved == EAI_SYSTEM ? ErrnoText(errno) : gai_strerror(resolved));
    return -1;
  }
  int fd = -1;
  for (const addrinfo* address = addresses; address != nullptr && fd < 0;
       address = address->ai_next) {
    int error = 0;
    fd = ConnectSocket(*address, deadline, &error);
    if (fd < 0) *failure = ErrnoText(error);
  }
  freeaddrinfo(addresses);
  return fd;
}

}  // namespace infini::rendezvous::store_client
