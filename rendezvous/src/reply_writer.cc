#include "reply_writer.h"

#include <utility>
#include <vector>

namespace infini::rendezvous::store_server {
namespace {

struct WriteRequest {
  uv_write_t request;
  ReplyWriter* writer = nullptr;
  wire::EncodedReply reply;
  size_t bytes = 0;   // all of it, values included
  size_t charge = 0;  // its share of the budget (the values are the table's)
};

}  // namespace

bool ReplyWriter::Write(Connection* connection, wire::EncodedReply reply) {
  auto* write = new WriteRequest;
  write->writer = this;
  write->reply = std::move(reply);
  // libuv only reads from these buffers.
  std::vector<uv_buf_t> buffers;
  const auto add = [&buffers](const std::string& bytes) {
    if (!bytes.empty()) {
      buffers.push_back(
          uv_buf_init(const_cast<char*>(bytes.data()), static_cast<unsigned>(bytes.size())));
    }
  };
  add(write->reply.head);
  if (write->reply.value) add(*write->reply.value);
  for (const wire::ReplyPiece& piece : write->reply.more) {
    add(piece.bytes);
    if (piece.value) add(*piece.value);
  }
  write->bytes = write->reply.size();
  write->charge = write->reply.own_bytes();
  if (uv_write(&write->request, reinterpret_cast<uv_stream_t*>(&connection->handle), buffers.data(),
               static_cast<unsigned>(buffers.size()), OnWritten) != 0) {
    delete write;
    return false;
  }
  connection->unsent_bytes += write->bytes;
  unsent_bytes_ += write->bytes;
  charged_bytes_ += write->charge;
  return true;
}

void ReplyWriter::OnWritten(uv_write_t* request, int status) {
  auto* connection = static_cast<Connection*>(request->handle->data);
  auto* write = reinterpret_cast<WriteRequest*>(request);
  ReplyWriter* self = write->writer;
  connection->unsent_bytes -= write->bytes;
  self->unsent_bytes_ -= write->bytes;
  self->charged_bytes_ -= write->charge;
  delete write;
  self->written_(connection, status);
}

}  // namespace infini::rendezvous::store_server
