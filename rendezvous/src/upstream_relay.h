// A relay store's way upstream: the requests that a relay (a TcpStoreServer
// with TcpStoreServerOptions::upstream) does not answer itself run here, on a
// few blocking upstream connections, each owned by one worker thread; the
// results come back to the server's loop through a queue and `wake`.
//
// Two kinds of work: a forwarded request (Set, Add, CompareSet, Delete,
// Check, NumKeys on upstream keys), answered with the reply the upstream
// gave; and a watch (an upstream Get of one key, for the waiters the server
// parked on it), answered with the value, or that it timed out or failed.
// The server watches each key once, however many of its clients wait on it.
//
// Workers are started as work arrives and none is idle, up to
// kMaxUpstreamConnections; each connects on its first job and again after its
// connection failed. The destructor does not wait for a worker blocked in an
// upstream call (a watch may last kLongestWatch): workers share the queue's
// state and are detached, and none calls `wake` after the relay is gone.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "infini/rendezvous/store.h"
#include "infini/rendezvous/tcp_store.h"
#include "key_value_table.h"
#include "request_codec.h"

namespace infini::rendezvous::store_server {

inline constexpr size_t kMaxUpstreamConnections = 32;
// The longest one upstream Get of a watch: a key still waited for is watched
// again after it.
inline constexpr std::chrono::milliseconds kLongestWatch{std::chrono::seconds(30)};

struct UpstreamResult {
  enum class Kind {
    kReply,         // `client`'s forwarded request: `reply`
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
  // `connect` makes one upstream connection (throws StoreError when it
  // cannot); `wake` is called on a worker thread after each result is queued.
  // `observe`, when set, is told every upstream call (TcpStoreServerOptions::
  // on_upstream_request).
  using Observer = std::function<void(const std::string& request, const std::string& key)>;
  UpstreamRelay(std::function<std::unique_ptr<Store>()> connect, std::function<void()> wake,
                Observer observe = {});
  ~UpstreamRelay();
  UpstreamRelay(const UpstreamRelay&) = delete;
  UpstreamRelay& operator=(const UpstreamRelay&) = delete;

  // Workers stop calling `wake` and leave after their call; safe on any
  // thread (the destructor does it too).
  void Stop();

  void Forward(ClientId client, wire::Request request);
  void Watch(const std::string& key, std::chrono::milliseconds timeout);
  std::deque<UpstreamResult> TakeResults();
  RelayCounts counts() const;

 private:
  struct State;
  struct Job;
  void Submit(Job job);
  static void Work(std::shared_ptr<State> state);

  std::shared_ptr<State> state_;
};

}  // namespace infini::rendezvous::store_server
