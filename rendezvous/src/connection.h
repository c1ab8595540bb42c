// One client's connection to the store server: the libuv handle, its
// input, its state (one at a time) and what the server keeps for it. The
// server's files act on it (tcp_store_server_impl.h).
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "key_value_table.h"
#include "request_codec.h"
#include "server_handshake.h"

namespace infini::rendezvous::store_server {

class ConnectionReader;
class TcpStoreServerImpl;

// Where a connection is in its life, one state at a time. Transitions:
// kHello -> kServing when its hello is accepted; kServing -> kQueued while
// its next frame waits for admission, -> kWaiting while its request waits in
// the table, -> kForwarded while it waits upstream (a relay), each back to
// kServing; any -> kRefusing (an error being flushed) -> kClosing.
enum class ConnectionState : uint8_t {
  kHello,      // its hello not yet accepted: hello frames only
  kServing,    // read within its allowance, its requests served in order
  kQueued,     // its next frame waits for room in the budget (not read)
  kWaiting,    // its request waits in the table (a Get or Wait)
  kForwarded,  // its request went upstream (a relay), answered from there
  kRefusing,   // an error reply is being flushed before it is closed
  kClosing,    // uv_close was called; freed in its callback
};

struct Connection {
  uv_tcp_t handle;
  TcpStoreServerImpl* server = nullptr;
  ConnectionReader* reader = nullptr;  // the server's, which reads it
  ClientId id = 0;
  wire::FrameParser input;
  size_t counted_input_bytes = 0;  // input's share of the server's buffered bytes
  size_t unsent_bytes = 0;         // replies handed to libuv, not yet written
  size_t admitted_bytes = 0;       // the first frame's size once admitted (charged)
  ServerHandshake hello;
  Milliseconds accepted_at = 0;
  Milliseconds last_activity = 0;  // a byte read or a reply written
  ConnectionState state = ConnectionState::kHello;
  // Memberships, orthogonal to the state.
  bool read_started = false;   // libuv reads it (uv_read_start)
  bool in_hangup_set = false;  // in the hang-up epoll set (not being read)
  bool in_ready_queue = false;
  bool closing() const { return state == ConnectionState::kClosing; }
  // Refusing or closing: nothing more of it is read or served.
  bool ending() const {
    return state == ConnectionState::kRefusing || state == ConnectionState::kClosing;
  }
  // The table's ids of its batched requests not yet answered
  // (each waits in the table as a client of its own), the answers to them
  // and the batches handled, to be sent in one frame at the end of the turn.
  std::unordered_set<ClientId> batch_waiters;
  wire::BatchReplyWriter batch_replies;
  uint32_t batches_done = 0;           // handled, not yet told
  bool in_batch_reply_owners = false;  // has batch replies to send this turn
  // Its on-close keys and their values (server_on_close.cc).
  std::unordered_map<std::string, std::string> on_close;
};

}  // namespace infini::rendezvous::store_server
