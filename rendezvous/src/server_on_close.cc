// On-close keys (wire_protocol.h, kSetOnClose): a client registers key =
// value on its connection, and the server sets it when that connection
// closes for any reason (the client's process was killed, the connection
// reset, a refusal) unless the client cancelled it first. Whoever waits on
// the key learns at once that the client is gone, not at the end of a
// heartbeat's timeout (the launcher's use: a node whose launcher died).
//
// Held on the connection, counted against max_stored_bytes with the table.
// A relay (server_relay.cc) registers an upstream key upstream too.

#include <string>
#include <utility>

#include "tcp_store_server_impl.h"

namespace infini::rendezvous::store_server {
namespace {

using wire::MessageType;

size_t RegistrationBytes(const std::string& key, const std::string& value) {
  return KeyValueTable::kKeyOverheadBytes + key.size() + value.size();
}

wire::Reply Ok() { return wire::Reply{}; }

}  // namespace

bool TcpStoreServerImpl::IsOnCloseRequest(const wire::Request& request) {
  return request.type == MessageType::kSetOnClose || request.type == MessageType::kCancelOnClose;
}

wire::Reply TcpStoreServerImpl::RegisterOnClose(Connection* connection,
                                                const wire::Request& request) {
  const std::string& key = request.keys.front();
  const auto found = connection->on_close.find(key);
  const size_t old_bytes =
      found == connection->on_close.end() ? 0 : RegistrationBytes(key, found->second);
  if (request.type == MessageType::kCancelOnClose) {
    if (found != connection->on_close.end()) connection->on_close.erase(found);
    on_close_bytes_ -= old_bytes;
    return Ok();
  }
  const size_t bytes = RegistrationBytes(key, request.value);
  if (table_.stored_bytes() + on_close_bytes_ - old_bytes + bytes > options_.max_stored_bytes) {
    wire::Reply refused;
    refused.type = MessageType::kError;
    refused.error = "registering on-close key '" + key + "' would exceed the store's " +
                    "max_stored_bytes (" + std::to_string(options_.max_stored_bytes) + ")";
    return refused;
  }
  connection->on_close[key] = request.value;
  on_close_bytes_ += bytes - old_bytes;
  return Ok();
}

void TcpStoreServerImpl::HandleOnClose(Connection* connection, wire::Request& request) {
  wire::Reply reply = RegisterOnClose(connection, request);
  if (reply.type == MessageType::kOk && RouteOnClose(connection, request)) return;
  Send(connection, wire::EncodeReply(reply));
}

// Sets the connection's on-close keys as a client of its own whose answers
// go nowhere (its waiters are woken by the Set).
void TcpStoreServerImpl::FireOnClose(Connection* connection) {
  for (auto& [key, value] : connection->on_close) {
    on_close_bytes_ -= RegistrationBytes(key, value);
    if (stopping_) continue;  // the server goes; nobody is left to tell
    if (SetOnCloseElsewhere(key, value)) continue;
    wire::Request set;
    set.type = MessageType::kSet;
    set.keys = {key};
    set.value = std::move(value);
    table_.Handle(++last_client_id_, std::move(set), Now());
  }
  connection->on_close.clear();
}

}  // namespace infini::rendezvous::store_server
