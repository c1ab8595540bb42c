// Reads the server's connections: each one's bytes within its allowance (one
// past its hello holds kUnchargedInputBytes besides its admitted frame; one
// before it is refused above max_unauthenticated_bytes, not even copied),
// libuv reading started and stopped as that allows, and a connection that is
// not read watched for its peer's close instead (HangupWatch). Counts the
// bytes received and not yet handled. What arrived goes to the
// ConnectionOwner, which serves it.
#pragma once

#include <uv.h>

#include <cstddef>
#include <string>
#include <vector>

#include "connection.h"
#include "connection_owner.h"
#include "hangup_watch.h"

namespace infini::rendezvous::store_server {

class ConnectionReader {
 public:
  // Input a connection past its hello may hold without admission: small
  // requests, and the start of the next one. Not charged (bounded per
  // connection); a frame larger than this is admitted whole first.
  static constexpr size_t kUnchargedInputBytes = size_t{4} << 10;

  ConnectionReader(ConnectionOwner& owner, size_t max_unauthenticated_bytes);

  // Watches hang-ups on `loop`; returns "" or what failed.
  std::string Start(uv_loop_t* loop, std::vector<uv_handle_t*>* open_handles) {
    loop_ = loop;
    return hangups_.Start(loop, open_handles);
  }

  // Reads what a just-accepted connection's client already sent (its hello,
  // usually), then reads it as it may.
  void Welcome(Connection* connection);
  // Starts or stops reading `connection` as its allowance says now.
  void Update(Connection* connection);
  // Its input changed (frames handled, or cleared): counted again.
  void Recount(Connection* connection);
  // Nothing more of it is read (it is being refused or closed).
  void Stop(Connection* connection);

  // Received, not yet handled, over all connections.
  size_t input_bytes() const { return input_bytes_; }

 private:
  static size_t Allowance(const Connection* connection);
  static void OnAllocate(uv_handle_t* handle, size_t suggested, uv_buf_t* buffer);
  static void OnRead(uv_stream_t* stream, ssize_t bytes_read, const uv_buf_t* buffer);
  void Receive(Connection* connection, const char* bytes, size_t count);
  bool WantsToRead(const Connection* connection) const;

  ConnectionOwner& owner_;
  const size_t max_unauthenticated_bytes_;
  uv_loop_t* loop_ = nullptr;
  HangupWatch hangups_;
  std::vector<char> chunk_;  // one buffer for every connection's reads
  size_t input_bytes_ = 0;
};

}  // namespace infini::rendezvous::store_server
