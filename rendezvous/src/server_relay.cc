// RelayServer (relay_server.h): a relay's requests that go upstream
// (TcpStoreServerOptions::upstream; docs/rendezvous.md, "Relay"). Node-local keys
// (node_local_key.h) live in the table as in any store. Writes and checks of other keys are
// forwarded (UpstreamRelay: one connection, in batches) and their connection waits for the
// upstream's reply. A Get or Wait parks in the table as usual, on keys that the table never holds
// for long: each upstream key that someone waits on is watched upstream once
// (one upstream Get), and its value, when it comes, is set and deleted at
// once, which wakes every waiter on it, each with its own deadline kept by
// the table. So the table is never a cache of the upstream: every Get goes
// upstream, and nothing the relay holds can be stale.

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "infini/rendezvous/node_local_key.h"
#include "relay_server.h"

namespace infini::rendezvous::store_server {
namespace {

using wire::MessageType;

// The relay's own requests to its table (setting a watched key's value and
// deleting it): answers to it find no connection and are dropped.
constexpr ClientId kRelayClient = std::numeric_limits<ClientId>::max();

bool IsUpstreamKey(const std::string& key) { return !IsNodeLocalKey(key); }

}  // namespace

RelayServer::~RelayServer() {
  if (relay_) relay_->Stop();  // its workers wake the loop no more
  StopServing();               // before upstream_async_ and relay_ go
}

void RelayServer::StartUpstream(const std::string& where) {
  InitHandle(uv_async_init(&loop_, &upstream_async_, OnUpstreamResults), &upstream_async_, where);
  relay_ = std::make_unique<UpstreamRelay>(
      *options_.upstream, [this] { uv_async_send(&upstream_async_); },
      options_.on_upstream_request);
}

// Returns false when the table answers `request` as it is.
bool RelayServer::Route(Connection* connection, wire::Request& request) {
  std::vector<std::string> upstream_keys;
  for (const std::string& key : request.keys) {
    if (IsUpstreamKey(key)) upstream_keys.push_back(key);
  }
  const auto local_keys_exist = [&] {
    return std::all_of(request.keys.begin(), request.keys.end(), [this](const std::string& key) {
      return IsUpstreamKey(key) || table_.Contains(key);
    });
  };
  switch (request.type) {
    case MessageType::kGet:
    case MessageType::kWait: {
      if (upstream_keys.empty()) return false;
      if (request.number <= 0) {
        // A 0 ms Get or Wait (a try_get) asks upstream once, as a direct one
        // asks the table once: the table holds no upstream key and would
        // answer kTimeout for one that exists.
        if (!local_keys_exist()) return false;  // the table answers kTimeout
        request.keys = std::move(upstream_keys);
        break;
      }
      if (!table_.Handle(connection->id, std::move(request), Now())) {
        connection->state = ConnectionState::kWaiting;
        WatchUpstream(upstream_keys);
      }
      return true;
    }
    case MessageType::kCheck: {
      if (upstream_keys.empty()) return false;
      if (!local_keys_exist()) return false;  // the table answers false
      request.keys = std::move(upstream_keys);
      break;
    }
    case MessageType::kNumKeys:
      break;  // the upstream's count
    default:
      if (upstream_keys.empty()) return false;
      break;
  }
  connection->state = ConnectionState::kForwarded;
  relay_->Forward(connection->id, std::move(request));
  return true;
}

// A watch lasts as long as the longest waiter on its key when it is made
// (at most RelayUpstream::longest_watch), never longer: waits with short timeouts on many
// keys leave no upstream waiters behind them. A waiter that came while it
// stood and waits longer is watched again when it ends (kWatchTimeout).
void RelayServer::WatchUpstream(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    if (watched_.contains(key)) continue;
    const Milliseconds latest = table_.LatestDeadlineOn(key);
    if (latest < 0) continue;
    const Milliseconds left = std::clamp<Milliseconds>(
        latest - Now(), 1, static_cast<Milliseconds>(options_.upstream->longest_watch.count()));
    watched_.insert(key);
    relay_->Watch(key, std::chrono::milliseconds(left));
  }
}

void RelayServer::OnUpstreamResults(uv_async_t* async) {
  auto* self = static_cast<RelayServer*>(async->data);
  self->TakeUpstreamResults();
  self->Pump();
}

void RelayServer::TakeUpstreamResults() {
  for (UpstreamResult& result : relay_->TakeResults()) {
    switch (result.kind) {
      case UpstreamResult::Kind::kReply: {
        const auto found = connections_.find(result.client);
        if (found == connections_.end() || found->second->ending()) break;
        Connection* connection = found->second;
        ReleaseAdmission(connection);  // when it failed before it was taken
        connection->state = ConnectionState::kServing;
        Send(connection, wire::EncodeReply(result.reply));
        MarkReady(connection);
        break;
      }
      case UpstreamResult::Kind::kTaken: {
        // Its bytes left the relay: the budget has room for the next rank's.
        const auto found = connections_.find(result.client);
        if (found != connections_.end() && !found->second->closing()) {
          ReleaseAdmission(found->second);
        }
        break;
      }
      case UpstreamResult::Kind::kWatched: {
        watched_.erase(result.key);
        wire::Request set;
        set.type = MessageType::kSet;
        set.keys = {result.key};
        set.value = std::move(result.value);
        table_.Handle(kRelayClient, std::move(set), Now());
        wire::Request erase;
        erase.type = MessageType::kDelete;
        erase.keys = {result.key};
        table_.Handle(kRelayClient, std::move(erase), Now());
        break;
      }
      case UpstreamResult::Kind::kWatchTimeout:
        watched_.erase(result.key);
        WatchUpstream({result.key});
        break;
      case UpstreamResult::Kind::kWatchFailed:
        watched_.erase(result.key);
        table_.FailWaitersOn(result.key, result.reply.error);
        break;
    }
  }
}

// An upstream key is registered upstream too, on the relay's own connection
// (forwarded like a Set, and answered from there): the relay sets it
// upstream when its client's connection closes, and the upstream sets it
// when the relay's connection closes, so a relay killed with its client (a
// launcher hosts its node's relay) still sets it.
bool RelayServer::RouteOnClose(Connection* connection, wire::Request& request) {
  if (!IsUpstreamKey(request.keys.front())) return false;
  connection->state = ConnectionState::kForwarded;
  relay_->Forward(connection->id, std::move(request));
  return true;
}

bool RelayServer::SetOnCloseElsewhere(const std::string& key, std::string& value) {
  if (!IsUpstreamKey(key)) return false;
  wire::Request set;
  set.type = MessageType::kSet;
  set.keys = {key};
  set.value = std::move(value);
  wire::Request cancel;
  cancel.type = MessageType::kCancelOnClose;
  cancel.keys = {key};
  // Answers to these ids find no connection and are dropped.
  relay_->Forward(++last_client_id_, std::move(set));
  relay_->Forward(++last_client_id_, std::move(cancel));
  return true;
}

}  // namespace infini::rendezvous::store_server
