// A relay store's way upstream: the requests that a relay (a TcpStoreServer
// with TcpStoreServerOptions::upstream) does not answer itself go to the
// run's store in batches (wire_protocol.h: kBatch) on two connections, each
// owned by a thread of its own: one lane for small requests (watches,
// counters, Gets, small Sets: at most RelayUpstream::small_request_bytes)
// and one for the others. The results come back to the server's loop through
// a queue and `wake`.
//
// Two kinds of work: a forwarded request (Set, Add, CompareSet, Delete,
// Check, NumKeys on upstream keys), answered with the reply the upstream
// gave; and a watch (an upstream Get of one key, for the waiters the server
// parked on it), answered with the value, or that it timed out or failed.
// The server watches each key once, however many of its clients wait on it.
//
// Batching, Nagle's way and without a timer, per lane: when no batch is in
// flight, whatever is queued leaves at once as one frame; while one is
// (sent, and the upstream has not yet said it handled it: the kBatchReply
// that carries its immediate answers says so), new work queues and leaves
// as the next frame when it has. A watch still waiting upstream holds
// nothing up once its batch was handled: the upstream answers each request
// by its tag, whenever it can. So an idle relay adds no latency, and a busy
// lane sends one frame per round trip.
//
// Fair shares: a small request never follows a large value's bytes on a
// connection, nor waits for the upstream to handle one (a 60 MiB Set takes
// 0.5 s at 1 Gb/s); large ones share a frame up to
// RelayUpstream::large_bytes_per_frame, or one larger travels alone. A
// forwarded request's bytes are the relay's until they were written
// upstream whole (kTaken): the server keeps them charged to its budget until
// then, so ranks wait for room instead of the relay growing.
//
// A lane connects on its first work and again after its connection failed;
// a failure answers every request in flight on it (and, when connecting
// failed, every one queued for it) with the error, as a lost connection did
// to the ranks before. The destructor does not wait for the threads, which
// may be connecting (RelayUpstream::connect_timeout): they share the
// queues' state and are detached, and never call `wake` after the relay is
// gone.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "infini/rendezvous/tcp_store.h"
#include "key_value_table.h"
#include "request_codec.h"

namespace infini::rendezvous::store_server {

struct UpstreamResult {
  enum class Kind {
    kReply,         // `client`'s forwarded request: `reply`
    kTaken,         // `client`'s forwarded request was written upstream whole
    kWatched,       // `key` holds `value` upstream
    kWatchTimeout,  // `key` did not appear upstream within the watch
    kWatchFailed,   // the upstream failed: `reply` is the error
  };
  Kind kind = Kind::kReply;
  ClientId client = 0;
  wire::Reply reply;
  std::string key;
  std::string value;
};

class UpstreamRelay {
 public:
  // `wake` is called on the relay's thread after results are queued.
  // `observe`, when set, is told every upstream request
  // (TcpStoreServerOptions::on_upstream_request).
  using Observer = std::function<void(const std::string& request, const std::string& key)>;
  UpstreamRelay(RelayUpstream upstream, std::function<void()> wake, Observer observe = {});
  ~UpstreamRelay();
  UpstreamRelay(const UpstreamRelay&) = delete;
  UpstreamRelay& operator=(const UpstreamRelay&) = delete;

  // The thread stops calling `wake` and leaves; safe on any thread (the
  // destructor does it too).
  void Stop();

  void Forward(ClientId client, wire::Request request);
  void Watch(const std::string& key, std::chrono::milliseconds timeout);
  std::deque<UpstreamResult> TakeResults();
  RelayCounts counts() const;

  struct State;
  struct Job;

 private:
  void Submit(Job job);

  std::shared_ptr<State> state_;
};

}  // namespace infini::rendezvous::store_server
