// One client's connection in the store server: opened for the Acceptor,
// served when ConnectionReader says bytes arrived, large requests admitted
// to the budget whole, its requests served in order (the hello through
// HelloStage, the rest by the table), its replies written, a refusal
// flushed before it is closed.

#include <sys/socket.h>
#include <uv.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "key_value_table.h"
#include "request_codec.h"
#include "tcp_store_server_impl.h"
#include "wire_protocol.h"

namespace infini::rendezvous::store_server {
namespace {

using wire::FrameWriter;
using wire::MessageType;

// While the budget is spent, a connection's replies queued above this (not
// max_unsent_bytes_per_connection) pause it.
constexpr size_t kMaxUnsentBytesOverBudget = size_t{64} << 10;
constexpr size_t kUnchargedInputBytes = ConnectionReader::kUnchargedInputBytes;

struct ShutdownRequest {
  uv_shutdown_t request;
};

}  // namespace

// ---- opening (for the Acceptor) ----

Connection* TcpStoreServerImpl::OpenConnection() {
  auto* connection = new Connection;
  connection->server = this;
  connection->reader = &reader_;
  connection->id = ++last_client_id_;
  connection->handle.data = connection;
  if (uv_tcp_init(&loop_, &connection->handle) != 0) {
    delete connection;
    return nullptr;
  }
  connections_.emplace(connection->id, connection);
  num_connections_.store(connections_.size(), std::memory_order_relaxed);
  return connection;
}

Connection* TcpStoreServerImpl::FindConnection(ClientId id) {
  const auto found = connections_.find(id);
  return found == connections_.end() ? nullptr : found->second;
}

void TcpStoreServerImpl::Welcome(Connection* connection) {
  reader_.Welcome(connection);
  Pump();
}

// ---- serving ----

bool TcpStoreServerImpl::CanServe(const Connection* connection) const {
  const ConnectionState state = connection->state;
  return (state == ConnectionState::kHello || state == ConnectionState::kServing ||
          state == ConnectionState::kQueued) &&
         connection->unsent_bytes <=
             (OverBudget()
                  ? std::min(kMaxUnsentBytesOverBudget, options_.max_unsent_bytes_per_connection)
                  : options_.max_unsent_bytes_per_connection);
}

void TcpStoreServerImpl::MarkReady(Connection* connection) {
  if (connection->in_ready_queue || connection->closing()) return;
  connection->in_ready_queue = true;
  ready_.push_back(connection);
}

// Handles the connection's buffered requests, in order, until one waits,
// its replies pile up, its next request waits for admission, or no whole
// frame is left.
void TcpStoreServerImpl::Serve(Connection* connection) {
  while (CanServe(connection)) {
    const bool ready = connection->hello.ready();
    const size_t limit = ready ? options_.max_message_bytes : options_.max_unauthenticated_bytes;
    std::string_view body;
    const auto status = connection->input.Next(limit, &body);
    if (status == wire::FrameParser::Status::kNeedMore) {
      if (ready) Admit(connection);
      break;
    }
    if (status == wire::FrameParser::Status::kTooLarge) {
      Refuse(connection, TooLargeText(connection));
      return;
    }
    if (ready) {
      HandleRequest(connection, body);
      // A request forwarded upstream stays charged until the relay wrote it
      // (UpstreamResult::kTaken): ranks wait for room, the relay never grows.
      if (connection->state != ConnectionState::kForwarded) ReleaseAdmission(connection);
    } else {
      hello_stage_.Take(connection, body);
    }
    DeliverCompletions();
  }
  if (connection->ending()) return;
  connection->input.Compact();
  reader_.Recount(connection);
  reader_.Update(connection);
}

void TcpStoreServerImpl::HandleRequest(Connection* connection, std::string_view body) {
  if (static_cast<MessageType>(body[0]) == MessageType::kBatch) {
    if (!TakesBatches()) {
      // Its clients are ranks, which send requests one by one; a batch of
      // theirs would have to be split between the table and upstream.
      Refuse(connection,
             "a relay takes no batches (request type 11): send the requests one by one");
      return;
    }
    HandleBatch(connection, body);
    return;
  }
  wire::Request request;
  if (const std::string error = wire::DecodeRequest(body, limits_, &request); !error.empty()) {
    Refuse(connection, error);
    return;
  }
  if (IsOnCloseRequest(request)) {
    HandleOnClose(connection, request);
    return;
  }
  if (Route(connection, request)) return;
  if (!table_.Handle(connection->id, std::move(request), Now())) {
    connection->state = ConnectionState::kWaiting;
  }
}

// ---- admission ----

// The connection's next frame is not whole: one larger than its uncharged
// input waits for admission (in the queue) unless it has it.
void TcpStoreServerImpl::Admit(Connection* connection) {
  if (admission_.Queue(connection, kUnchargedInputBytes)) AdmitQueued();
}

void TcpStoreServerImpl::AdmitQueued() {
  admission_.AdmitQueued(
      [this](ClientId id) { return FindConnection(id); },
      table_.waiter_bytes() + replies_.charged_bytes(),
      [this](Connection* connection) {
        // Room for all of it now, so that the buffer never doubles past it.
        connection->input.Reserve(connection->admitted_bytes + kUnchargedInputBytes);
        connection->last_activity = Now();  // the stall clock starts now
        reader_.Update(connection);
      });
}

void TcpStoreServerImpl::ReleaseAdmission(Connection* connection) {
  admission_.Release(connection);
}

std::string TcpStoreServerImpl::TooLargeText(const Connection* connection) const {
  const uint32_t announced = connection->input.announced_body_bytes();
  if (!connection->hello.ready()) {
    return "message of " + std::to_string(announced) +
           " bytes refused before the hello was accepted (at most " +
           std::to_string(options_.max_unauthenticated_bytes) + ")";
  }
  return "message of " + std::to_string(announced) +
         " bytes refused: the store's max_message_bytes is " +
         std::to_string(options_.max_message_bytes);
}

// ---- writing, refusing, closing ----

void TcpStoreServerImpl::Send(Connection* connection, wire::EncodedReply reply) {
  if (connection->closing()) return;
  if (!replies_.Write(connection, std::move(reply))) Close(connection);
}

void TcpStoreServerImpl::OnReplyWritten(Connection* connection, int status) {
  if (connection->closing()) {
    // Cancelled by the close; what it held is free for the others.
  } else if (status < 0) {
    Close(connection);
  } else {
    connection->last_activity = Now();
    MarkReady(connection);  // it may have paused on its reply queue
  }
  Pump();
}

// Tells the client why, then closes its connection once the reply is out.
void TcpStoreServerImpl::Refuse(Connection* connection, const std::string& reason) {
  if (connection->ending()) return;
  hello_stage_.Refusing(connection);
  Send(connection,
       wire::EncodedReply{FrameWriter(MessageType::kError).Str(reason).Finish(), {}, {}});
  if (connection->closing()) return;
  connection->state = ConnectionState::kRefusing;
  ReleaseAdmission(connection);
  reader_.Stop(connection);
  auto* shutdown = new ShutdownRequest;
  if (uv_shutdown(&shutdown->request, Stream(connection), OnShutdown) != 0) {
    delete shutdown;
    Close(connection);
  }
}

void TcpStoreServerImpl::OnShutdown(uv_shutdown_t* request, int /*status*/) {
  auto* connection = static_cast<Connection*>(request->handle->data);
  delete reinterpret_cast<ShutdownRequest*>(request);
  TcpStoreServerImpl* self = connection->server;
  self->Close(connection);
  self->Pump();
}

void TcpStoreServerImpl::Close(Connection* connection, bool shed) {
  if (connection->closing()) return;
  hello_stage_.Closing(connection, shed);
  connection->state = ConnectionState::kClosing;
  ReleaseAdmission(connection);
  reader_.Stop(connection);
  acceptor_.NoLongerStranger(connection->id);
  table_.Forget(connection->id);
  ForgetBatches(connection);
  FireOnClose(connection);
  connections_.erase(connection->id);
  num_connections_.store(connections_.size(), std::memory_order_relaxed);
  uv_close(reinterpret_cast<uv_handle_t*>(&connection->handle),
           [](uv_handle_t* handle) { delete static_cast<Connection*>(handle->data); });
}

}  // namespace infini::rendezvous::store_server
