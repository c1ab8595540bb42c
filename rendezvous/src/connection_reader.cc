// Reading the server's connections (connection_reader.h).

#include "connection_reader.h"

#include <sys/socket.h>

#include <algorithm>
#include <string>

namespace infini::rendezvous::store_server {
namespace {

constexpr size_t kChunkBytes = size_t{64} << 10;

uv_stream_t* Stream(Connection* connection) {
  return reinterpret_cast<uv_stream_t*>(&connection->handle);
}

}  // namespace

ConnectionReader::ConnectionReader(ConnectionOwner& owner, size_t max_unauthenticated_bytes)
    : owner_(owner), max_unauthenticated_bytes_(max_unauthenticated_bytes), hangups_(owner) {
  chunk_.resize(kChunkBytes);
}

// The hello that the client sent right after connecting is usually there
// by the time it is accepted: read it now, so that a client holding the
// token is known before any other connection can push it out.
void ConnectionReader::Welcome(Connection* connection) {
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(&connection->handle), &fd) == 0) {
    const ssize_t got = ::recv(fd, chunk_.data(), chunk_.size(), MSG_DONTWAIT);
    if (got > 0) {
      Receive(connection, chunk_.data(), static_cast<size_t>(got));
    } else if (got == 0) {
      owner_.CloseConnection(connection, /*shed=*/false);
    }  // nothing yet, or an error that the first read reports
  }
  Update(connection);
}

// Input a connection past its hello may hold now. A forwarded request's
// charge is the relay's queue's, not room for the connection's next one.
size_t ConnectionReader::Allowance(const Connection* connection) {
  return kUnchargedInputBytes +
         (connection->state == ConnectionState::kForwarded ? 0 : connection->admitted_bytes);
}

void ConnectionReader::OnAllocate(uv_handle_t* handle, size_t /*suggested*/, uv_buf_t* buffer) {
  // One buffer for every connection: the loop is single-threaded and OnRead
  // copies what it got before the next read. A connection past its hello
  // reads no more than its allowance (a connection before it is refused
  // above max_unauthenticated_bytes, unread).
  auto* connection = static_cast<Connection*>(handle->data);
  ConnectionReader* self = connection->reader;
  size_t room = self->chunk_.size();
  if (connection->hello.ready()) {
    const size_t allowance = Allowance(connection);
    const size_t held = connection->input.buffered_bytes();
    room = std::min(room, allowance > held ? allowance - held : 0);
  }
  *buffer = uv_buf_init(self->chunk_.data(), static_cast<unsigned>(room));
}

void ConnectionReader::OnRead(uv_stream_t* stream, ssize_t bytes_read, const uv_buf_t* buffer) {
  auto* connection = static_cast<Connection*>(stream->data);
  ConnectionReader* self = connection->reader;
  if (bytes_read == UV_ENOBUFS) {  // its allowance is full: stop reading
    self->Update(connection);
    return;
  }
  if (bytes_read < 0) {  // EOF or a broken connection
    self->owner_.CloseConnection(connection, /*shed=*/false);
    self->owner_.PumpReady();
    return;
  }
  if (bytes_read == 0 || connection->ending()) return;
  self->Receive(connection, buffer->base, static_cast<size_t>(bytes_read));
  self->owner_.PumpReady();
}

void ConnectionReader::Receive(Connection* connection, const char* bytes, size_t count) {
  if (!connection->hello.ready() &&
      connection->input.buffered_bytes() + count > max_unauthenticated_bytes_) {
    // Not even copied: a stranger gets a few KiB of this server, no more.
    owner_.RefuseConnection(connection, "more than " + std::to_string(max_unauthenticated_bytes_) +
                                            " bytes before the hello was accepted");
    return;
  }
  connection->input.Append(bytes, count);
  Recount(connection);
  connection->last_activity = static_cast<Milliseconds>(uv_now(loop_));
  owner_.Arrived(connection);
}

void ConnectionReader::Recount(Connection* connection) {
  const size_t held = connection->input.buffered_bytes();
  input_bytes_ = input_bytes_ - connection->counted_input_bytes + held;
  connection->counted_input_bytes = held;
}

bool ConnectionReader::WantsToRead(const Connection* connection) const {
  if (connection->ending() || connection->state == ConnectionState::kQueued) return false;
  if (!connection->hello.ready()) return true;
  return connection->input.buffered_bytes() < Allowance(connection);
}

// Reads when it may; a connection that is not read is watched for its
// peer's close instead.
void ConnectionReader::Update(Connection* connection) {
  if (connection->ending()) return;
  const bool want = WantsToRead(connection);
  if (want != connection->read_started) {
    if (want) {
      if (uv_read_start(Stream(connection), OnAllocate, OnRead) != 0) {
        owner_.CloseConnection(connection, /*shed=*/false);
        return;
      }
    } else {
      uv_read_stop(Stream(connection));
    }
    connection->read_started = want;
  }
  if (want) {
    hangups_.Unwatch(connection);
  } else {
    hangups_.Watch(connection);
  }
}

void ConnectionReader::Stop(Connection* connection) {
  hangups_.Unwatch(connection);
  if (connection->read_started) uv_read_stop(Stream(connection));
  connection->read_started = false;
  connection->input.Clear();
  Recount(connection);
}

}  // namespace infini::rendezvous::store_server
