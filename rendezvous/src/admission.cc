#include "admission.h"

namespace infini::rendezvous::store_server {

size_t Admission::NextFrameBytes(const Connection& connection) {
  if (connection.input.buffered_bytes() < wire::kFrameHeaderBytes) return 0;
  return wire::kFrameHeaderBytes + connection.input.announced_body_bytes();
}

bool Admission::Queue(Connection* connection, size_t uncharged_bytes) {
  if (NextFrameBytes(*connection) <= uncharged_bytes || connection->admitted_bytes > 0 ||
      connection->state != ConnectionState::kServing) {
    return false;
  }
  connection->state = ConnectionState::kQueued;
  queue_.push_back(connection->id);
  return true;
}

void Admission::AdmitQueued(const std::function<Connection*(ClientId)>& find, size_t other_charges,
                            const std::function<void(Connection*)>& admitted) {
  while (!queue_.empty()) {
    Connection* connection = find(queue_.front());
    if (connection == nullptr || connection->state != ConnectionState::kQueued) {
      queue_.pop_front();  // left, or refused, meanwhile
      continue;
    }
    const size_t frame = NextFrameBytes(*connection);
    const size_t charged = admitted_bytes_ + other_charges;
    if (charged > budget_ || frame > budget_ - charged) return;
    queue_.pop_front();
    connection->state = ConnectionState::kServing;
    connection->admitted_bytes = frame;
    admitted_bytes_ += frame;
    admitted(connection);
  }
}

void Admission::Release(Connection* connection) {
  admitted_bytes_ -= connection->admitted_bytes;
  connection->admitted_bytes = 0;
}

}  // namespace infini::rendezvous::store_server
