// The store server's replies on their way out: written with libuv, values
// shared with the table (a kValue's value and a batch reply's values are
// handed to one uv_write as buffers of their own, never copied), counted per
// connection and in all while unsent, and charged to the budget less those
// shared values.
#pragma once

#include <uv.h>

#include <cstddef>
#include <functional>

#include "connection.h"
#include "request_codec.h"

namespace infini::rendezvous::store_server {

class ReplyWriter {
 public:
  // Told when a write ended (status < 0: it failed), on the loop's thread.
  using Written = std::function<void(Connection* connection, int status)>;
  explicit ReplyWriter(Written written) : written_(std::move(written)) {}

  // Hands `reply` to libuv; false when libuv refused it (the caller closes
  // the connection).
  bool Write(Connection* connection, wire::EncodedReply reply);

  // Bytes handed to libuv and not yet written, values included.
  size_t unsent_bytes() const { return unsent_bytes_; }
  // The same less the values shared with the table: what the budget is
  // charged.
  size_t charged_bytes() const { return charged_bytes_; }

 private:
  static void OnWritten(uv_write_t* request, int status);

  Written written_;
  size_t unsent_bytes_ = 0;
  size_t charged_bytes_ = 0;
};

}  // namespace infini::rendezvous::store_server
