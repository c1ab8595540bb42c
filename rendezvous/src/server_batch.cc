// Version 4's batched requests (wire_protocol.h, kBatch): each request of a
// batch is handled by the table as a client of its own (a fresh id), so a Get
// that waits holds up neither the requests behind it nor its connection, and
// each keeps its own deadline. Answers are routed back by id to their
// connection and tag, and all that one turn of the loop made for a
// connection leave in one kBatchReply frame (a few when they exceed the
// message limit), which also counts the batches handled: so a batch costs
// one read and one write however many requests it holds, and its client
// knows when it was read.

#include <string_view>
#include <utility>
#include <vector>

#include "request_codec.h"
#include "tcp_store_server_impl.h"
#include "wire_protocol.h"

namespace infini::rendezvous::store_server {

void TcpStoreServerImpl::HandleBatch(Connection* connection, std::string_view body) {
  std::vector<wire::TaggedRequest> requests;
  if (const std::string error = wire::DecodeBatch(body, limits_, &requests); !error.empty()) {
    Refuse(connection, error);
    return;
  }
  for (wire::TaggedRequest& tagged : requests) {
    if (IsOnCloseRequest(tagged.request)) {
      // The connection's, answered at once (a relay's registrations).
      OweBatchReply(connection);
      connection->batch_replies.Add(tagged.tag, RegisterOnClose(connection, tagged.request));
      continue;
    }
    const ClientId id = ++last_client_id_;
    batch_entries_[id] = {.connection = connection->id, .tag = tagged.tag};
    connection->batch_waiters.insert(id);
    table_.Handle(id, std::move(tagged.request), Now());
  }
  ++connection->batches_done;
  OweBatchReply(connection);
}

void TcpStoreServerImpl::OweBatchReply(Connection* connection) {
  if (connection->in_batch_reply_owners) return;
  connection->in_batch_reply_owners = true;
  batch_reply_owners_.push_back(connection->id);
}

bool TcpStoreServerImpl::RouteBatchReply(Completion& completion) {
  const auto entry = batch_entries_.find(completion.client);
  if (entry == batch_entries_.end()) return false;
  const BatchEntry owner = entry->second;
  batch_entries_.erase(entry);
  const auto found = connections_.find(owner.connection);
  if (found == connections_.end() || found->second->closing()) return true;
  Connection* connection = found->second;
  connection->batch_waiters.erase(completion.client);
  const wire::Reply& reply = completion.reply;
  const size_t reply_bytes =
      wire::kMessageOverheadBytes + reply.error.size() + (reply.value ? reply.value->size() : 0);
  if (!connection->batch_replies.empty() &&
      connection->batch_replies.body_bytes() + reply_bytes > options_.max_message_bytes) {
    // Within what the client accepts (max_message_bytes and a little).
    Send(connection, connection->batch_replies.Finish(std::exchange(connection->batches_done, 0)));
    if (connection->closing()) return true;
  }
  OweBatchReply(connection);
  connection->batch_replies.Add(owner.tag, reply);
  return true;
}

void TcpStoreServerImpl::SendBatchReplies() {
  for (const ClientId id : std::exchange(batch_reply_owners_, {})) {
    const auto found = connections_.find(id);
    if (found == connections_.end() || found->second->closing()) continue;
    Connection* connection = found->second;
    connection->in_batch_reply_owners = false;
    if (connection->batch_replies.empty() && connection->batches_done == 0) continue;
    Send(connection, connection->batch_replies.Finish(std::exchange(connection->batches_done, 0)));
  }
}

void TcpStoreServerImpl::ForgetBatches(Connection* connection) {
  for (const ClientId id : connection->batch_waiters) {
    table_.Forget(id);
    batch_entries_.erase(id);
  }
  connection->batch_waiters.clear();
}

}  // namespace infini::rendezvous::store_server
