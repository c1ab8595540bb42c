// The budget's gate (TcpStoreServerOptions::max_buffered_bytes): a frame
// larger than a connection's uncharged input is read only once the budget
// holds all of it besides what is already charged, first come first
// admitted, so every admitted request completes and a large one is never
// overtaken for ever. Knows no sockets: the server finds connections by id
// and is told which were admitted.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>

#include "connection.h"

namespace infini::rendezvous::store_server {

class Admission {
 public:
  explicit Admission(size_t budget) : budget_(budget) {}

  // The connection's next frame (header included) once its header arrived,
  // else 0.
  static size_t NextFrameBytes(const Connection& connection);

  // Queues `connection` when it is kServing, not admitted, and its next
  // frame is larger than `uncharged_bytes` (it becomes kQueued); returns
  // whether it did.
  bool Queue(Connection* connection, size_t uncharged_bytes);
  // Admits queued frames, oldest first, while the budget holds each whole
  // besides the admitted ones and `other_charges`: each becomes kServing,
  // charged its frame, and is handed to `admitted`. `find` is nullptr for a
  // connection that left.
  void AdmitQueued(const std::function<Connection*(ClientId)>& find, size_t other_charges,
                   const std::function<void(Connection*)>& admitted);
  // Gives back what `connection` was charged (its request was handled, or
  // written upstream, or it is refused or closed).
  void Release(Connection* connection);

  // Admitted frames, whole.
  size_t admitted_bytes() const { return admitted_bytes_; }

 private:
  const size_t budget_;
  std::deque<ClientId> queue_;
  size_t admitted_bytes_ = 0;
};

}  // namespace infini::rendezvous::store_server
