// --rdzv_backend=c10d/static: node 0's infini_run hosts the TCP store at the
// rendezvous endpoint (ranks use it too); the other nodes join it. Liveness
// is a heartbeat counter per node that node 0 watches.
#include <time.h>

#include <cstdio>
#include <ctime>
#include <map>

#include "infini/launch/net_util.h"
#include "infini/launch/rendezvous_handler.h"
#include "infini/rendezvous/tcp_store.h"
#include "rendezvous_protocol.h"

namespace infini::launch {
namespace {

using Clock = std::chrono::steady_clock;
using rendezvous::ConnectProgress;
using rendezvous::ConnectWait;
using rendezvous::Store;
using rendezvous::StoreError;
using rendezvous::StoreHandshakeError;
using rendezvous::TcpStoreClient;
using rendezvous::TcpStoreServer;
using rendezvous::TcpStoreServerOptions;
using std::chrono::milliseconds;

// "12:00:00 UTC", this host's wall clock.
std::string ClockTime(std::chrono::system_clock::time_point when) {
  const time_t seconds = std::chrono::system_clock::to_time_t(when);
  tm local{};
  char text[64];
  if (localtime_r(&seconds, &local) == nullptr ||
      std::strftime(text, sizeof(text), "%H:%M:%S %Z", &local) == 0) {
    return "?";
  }
  return text;
}

// A joining node that cannot reach node 0's store yet says so after 5 s and
// every 30 s (node 0 may start later, or never).
ConnectProgress JoinWaitReporter(const LaunchOptions& options) {
  ConnectProgress progress;
  const milliseconds timeout = options.rendezvous_timeout;
  const std::string flags = options.rendezvous_flags;
  progress.report = [timeout, flags](const ConnectWait& wait) {
    fprintf(stderr,
            "infini_run: waiting for node 0's rendezvous store at %s (%s) since %s, %lld s ago "
            "(last try: %s); gives up at %s, in %lld s (--rdzv_timeout %s)\n",
            wait.endpoint.c_str(), flags.c_str(), ClockTime(wait.since).c_str(),
            static_cast<long long>((wait.waited.count() + 500) / 1000),
            OneLine(wait.last_failure).c_str(),
            ClockTime(wait.since + wait.waited + wait.left).c_str(),
            static_cast<long long>((wait.left.count() + 999) / 1000), Seconds(timeout).c_str());
  };
  progress.first = options.FirstWaitingNote();
  progress.every = options.waiting_note_interval;
  return progress;
}

class TcpRendezvous final : public RendezvousHandler {
 public:
  explicit TcpRendezvous(const LaunchOptions& options)
      : options_(options),
        endpoint_(options.rendezvous_host + ":" + std::to_string(options.rendezvous_port)),
        heartbeat_interval_(std::max(
            milliseconds(50), std::min(options.heartbeat_timeout / 4, milliseconds(5000)))) {}

  void Connect() override {
    if (options_.node_rank < 0 && IsLocalHost(options_.rendezvous_host)) {
      // Whoever binds the endpoint first hosts it (torchrun's c10d style).
      try {
        Host();
      } catch (const LaunchError&) {
        server_.reset();
        Join();
      }
    } else if (options_.node_rank == 0) {
      Host();
    } else {
      Join();
    }
  }

  Store& store() override { return *store_; }

  AgreedConfig AgreeOnConfig(const std::string& mine) override {
    if (server_) {
      store_->Set(Key("config"), mine);
      return {mine, "node 0", "node 0"};
    }
    try {
      return {store_->Get(Key("config")), "node 0", "node 0"};
    } catch (const StoreError& error) {
      throw LaunchError("the rendezvous endpoint " + endpoint_ +
                        " answered but node 0 published no run configuration (" + error.what() +
                        ")");
    }
  }

  RunRecordStore& records() override { return *records_; }

  void Announce(RendezvousWorld* world) override {
    node_rank_ = world->node_rank;
    // From here node 0 watches this node's heartbeat.
    store_->Add(NodeKeys(round_, "heartbeat", node_rank_), 1);
    world->store_addr = options_.rendezvous_host;
    world->store_port =
        server_ ? server_->port() : options_.rendezvous_port;  // port 0: the one bound
    // Node 0 and its MASTER_PORT are the same in every round.
    world->master_addr = store_->Get(Key("master_addr"));
    world->master_port = static_cast<uint16_t>(std::stoi(store_->Get(Key("master_port"))));
  }

  bool hosts_store() const override { return server_ != nullptr; }

  void EnterRound(int round, int nnodes) override {
    round_ = round;
    nnodes_ = nnodes;
    heartbeats_.clear();
    reported_.clear();
    closed_seen_.clear();
    next_heartbeat_ = {};
  }

  milliseconds StartWatch(std::function<void()>) override { return options_.monitor_interval; }

  MembershipChange Watch(const std::vector<std::string>& owners) override {
    MembershipChange change;
    // From the link thread's first step: the connection is this
    // launcher's for good by then. It is its own, never its relay's: the
    // heartbeat and the run's outcome must not queue behind its ranks'
    // values on the relay's upstream connection (a 60 MiB SET takes 0.5 s
    // on a 1 Gb/s link, and the relay sends one frame at a time).
    if (!server_ && !left_ && registered_round_ != round_) RegisterOnClose();
    if (server_) change.lost = CheckClosedConnections(owners);
    const Clock::time_point now = Clock::now();
    if (now < next_heartbeat_) return change;
    store_->Add(NodeKeys(round_, "heartbeat", node_rank_), 1);
    if (server_) {
      for (LostNode& node : CheckHeartbeats(owners, now)) change.lost.push_back(std::move(node));
    }
    next_heartbeat_ = now + heartbeat_interval_;
    return change;
  }

  std::string Describe() const override {
    return "the rendezvous store at " + endpoint_ + " (node 0's infini_run died or stalled)";
  }

  // Unchanged from what the store said: "rendezvous store: <why>".
  LaunchError JoinError(const StoreError& error) const override {
    return LaunchError(std::string("rendezvous store: ") + error.what());
  }

  void RemoveRun() override {}  // the store ends with node 0

  void LeaveCleanly() override {
    left_ = true;  // the link's last Watch must not register them again
    if (registered_round_ < 0) return;
    store_->CancelOnClose(NodeKeys(registered_round_, "launcher_gone", node_rank_));
    store_->CancelOnClose(RoundKey(registered_round_, "launcher_gone"));
  }

  // The record's handle stays with the handler: a link thread left behind
  // may still read through it.
  void Shutdown(const std::function<void(milliseconds)>&) override { server_.reset(); }

 private:
  void Host() {
    TcpStoreServerOptions server_options;
    server_options.host = options_.rendezvous_host;  // the address it is given
    server_options.port = options_.rendezvous_port;
    server_options.token = options_.run_token;
    try {
      server_ = TcpStoreServer::Start(server_options);
    } catch (const StoreError& error) {
      throw LaunchError("node 0 cannot host the rendezvous store at " + endpoint_ + " (" +
                        options_.rendezvous_flags + "): " + error.what());
    }
    endpoint_ = options_.rendezvous_host + ":" + std::to_string(server_->port());
    store_ = TcpStoreClient::Connect(options_.rendezvous_host, server_->port(),
                                     options_.rendezvous_timeout, options_.run_token);
    store_->set_timeout(options_.heartbeat_timeout);
    records_ = MakeKeyRunRecordStore(*store_);
    store_->Set(Key("master_addr"),
                options_.local_addr.empty() ? options_.rendezvous_host : options_.local_addr);
    store_->Set(Key("master_port"), std::to_string(PickFreePort(options_.rendezvous_host)));
  }

  void Join() {
    try {
      store_ = TcpStoreClient::Connect(options_.rendezvous_host, options_.rendezvous_port,
                                       options_.rendezvous_timeout, options_.run_token,
                                       JoinWaitReporter(options_));
    } catch (const StoreHandshakeError& error) {
      throw LaunchError("the rendezvous endpoint " + endpoint_ + " (" + options_.rendezvous_flags +
                        ") answered but is not this run's store: " + error.what());
    } catch (const StoreError& error) {
      throw LaunchError("cannot reach the rendezvous endpoint " + endpoint_ + " within " +
                        Seconds(options_.rendezvous_timeout) + " (" + options_.rendezvous_flags +
                        ", --rdzv_timeout); is node 0's infini_run running? (" + error.what() +
                        ")");
    }
    // Node 0 answers at once when alive: a stalled node 0 is noticed within
    // the heartbeat timeout.
    store_->set_timeout(options_.heartbeat_timeout);
    records_ = MakeKeyRunRecordStore(*store_);
  }

  // A launcher that dies is lost when its store connection closes, not a
  // heartbeat timeout later: the store sets these keys then (on-close keys,
  // docs/rendezvous.md). Its own key names its launcher (a replacement's slot
  // is not its predecessor's); the round's shared key changes with every
  // close, so node 0 reads one key per step.
  void RegisterOnClose() {
    const std::string& identity = this->identity();
    store_->SetOnClose(NodeKeys(round_, "launcher_gone", node_rank_), identity);
    store_->SetOnClose(RoundKey(round_, "launcher_gone"),
                       std::to_string(node_rank_) + " " + identity);
    registered_round_ = round_;
  }

  // Node 0 only: nodes whose launcher's connection closed (a clean exit
  // cancels its on-close keys first, on the same connection).
  std::vector<LostNode> CheckClosedConnections(const std::vector<std::string>& owners) {
    std::vector<LostNode> lost;
    const std::string any_key = RoundKey(round_, "launcher_gone");
    if (!store_->Check({any_key})) return lost;
    const std::string any = store_->Get(any_key);
    if (any == closed_seen_) return lost;
    closed_seen_ = any;
    for (int node = 0; node < nnodes_; ++node) {
      const std::string closed_key = NodeKeys(round_, "launcher_gone", node);
      if (node == node_rank_ || reported_.count(node) || !store_->Check({closed_key})) continue;
      const std::string launcher = store_->Get(closed_key);
      if (OwnerOf(owners, node) != launcher) continue;  // a lost predecessor's
      reported_[node] = launcher;
      lost.push_back({node,
                      "node " + std::to_string(node) + " lost: its infini_run (" + launcher +
                          ") closed its connection to the rendezvous store (it died)",
                      launcher, true});
    }
    return lost;
  }

  // Node 0 only: a node whose counter did not move for heartbeat_timeout is
  // lost (it stalled, or its link was cut).
  std::vector<LostNode> CheckHeartbeats(const std::vector<std::string>& owners,
                                        Clock::time_point now) {
    std::vector<LostNode> lost;
    for (int node = 0; node < nnodes_; ++node) {
      const std::string heartbeat_key = NodeKeys(round_, "heartbeat", node);
      const std::string owner = OwnerOf(owners, node);
      if (reported_.count(node)) {
        // A replacement took the slot (--on_failure=shrink): watch it afresh.
        if (owner == reported_[node]) continue;
        reported_.erase(node);
        heartbeats_.erase(node);
      }
      if (node == node_rank_ || !store_->Check({heartbeat_key})) continue;
      const int64_t count = store_->Add(heartbeat_key, 0);
      auto [entry, inserted] = heartbeats_.try_emplace(node, count, now);
      if (inserted || entry->second.first != count) {
        entry->second = {count, now};
        continue;
      }
      if (now - entry->second.second < options_.heartbeat_timeout) continue;
      reported_[node] = owner;
      lost.push_back({node,
                      "node " + std::to_string(node) + " lost: its infini_run (" + owner +
                          ") sent no heartbeat for " + Seconds(options_.heartbeat_timeout) +
                          " (it died or stalled; --rdzv_conf=heartbeat_timeout)",
                      owner});
    }
    return lost;
  }

  static std::string OwnerOf(const std::vector<std::string>& owners, int node) {
    return node < static_cast<int>(owners.size()) ? owners[static_cast<size_t>(node)] : "?";
  }

  const LaunchOptions options_;
  std::string endpoint_;  // "host:port", for messages (the bound port once hosting)
  const milliseconds heartbeat_interval_;
  std::unique_ptr<TcpStoreServer> server_;  // node 0
  std::unique_ptr<Store> store_;
  std::unique_ptr<RunRecordStore> records_;  // on store_
  int node_rank_ = 0;
  // The round whose keys this node uses (EnterRound), and its size.
  int round_ = 0;
  int nnodes_ = options_.nnodes;
  // Link thread: when to beat next; node 0: each node's last count and when
  // it moved, and the nodes already reported lost (with their owner then).
  Clock::time_point next_heartbeat_{};
  std::map<int, std::pair<int64_t, Clock::time_point>> heartbeats_;
  std::map<int, std::string> reported_;
  // A non-host's round whose on-close keys are registered; node 0: the
  // round's shared on-close key as last read.
  int registered_round_ = -1;
  bool left_ = false;  // LeaveCleanly: its on-close keys are cancelled
  std::string closed_seen_;
};

}  // namespace

std::shared_ptr<RendezvousHandler> MakeTcpRendezvous(const LaunchOptions& options) {
  return std::make_shared<TcpRendezvous>(options);
}

}  // namespace infini::launch
