// --rdzv_backend=etcd: the launchers meet through etcd; node 0 still hosts
// the ranks' store, so that etcd carries the launchers' traffic only.
// Liveness is each node's lease: its alive/<r> key vanishes when the lease
// expires, and the watch on the run's prefix tells every node.
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "infini/launch/net_util.h"
#include "infini/launch/rendezvous_handler.h"
#include "infini/rendezvous/etcd_store.h"
#include "infini/rendezvous/tcp_store.h"
#include "rendezvous_protocol.h"

namespace infini::launch {
namespace {

using rendezvous::EtcdEvent;
using rendezvous::EtcdStore;
using rendezvous::EtcdStoreOptions;
using rendezvous::Store;
using rendezvous::StoreError;
using rendezvous::TcpStoreServer;
using rendezvous::TcpStoreServerOptions;
using std::chrono::milliseconds;

// The link thread reads when the watch reports a change; this is only the
// period of a read that no change prompted.
constexpr milliseconds kQuietReadPeriod{2000};
// How long the launcher's end waits for the link thread's last etcd request.
constexpr milliseconds kLinkStopBound{6000};

class EtcdRendezvous final : public RendezvousHandler {
 public:
  explicit EtcdRendezvous(const LaunchOptions& options) : options_(options) {
    for (const std::string& endpoint : options.etcd_endpoints) {
      endpoints_text_ += (endpoints_text_.empty() ? "" : ",") + endpoint;
    }
  }

  void Connect() override {
    EtcdStoreOptions etcd_options;
    etcd_options.endpoints = options_.etcd_endpoints;
    etcd_options.key_prefix = rendezvous::EtcdRunPrefix(options_.run_id, options_.run_token);
    etcd_options.lease_ttl = options_.heartbeat_timeout;
    etcd_options.request_timeout =
        std::min(milliseconds(5000), std::max(milliseconds(500), options_.heartbeat_timeout / 2));
    const char* user = getenv("INFINI_ETCD_USER");
    const char* password = getenv("INFINI_ETCD_PASSWORD");
    etcd_options.user = user ? user : "";
    etcd_options.password = password ? password : "";
    try {
      etcd_ = EtcdStore::Connect(etcd_options);
      records_ = MakeEtcdRunRecordStore(etcd_options);
    } catch (const StoreError& error) {
      const std::string what = error.what();
      // etcd's own authentication: name the variables that carry the login.
      if (what.find("user name is empty") != std::string::npos) {
        throw LaunchError(
            "etcd at " + endpoints_text_ +
            " (--rdzv_endpoint) has authentication on and INFINI_ETCD_USER is not "
            "set: expected INFINI_ETCD_USER and INFINI_ETCD_PASSWORD of an etcd user (" +
            what + ")");
      }
      if (what.find("authentication failed") != std::string::npos) {
        throw LaunchError("etcd at " + endpoints_text_ +
                          " (--rdzv_endpoint) refused INFINI_ETCD_USER='" +
                          OneLine(etcd_options.user) +
                          "' and its INFINI_ETCD_PASSWORD: expected an etcd user and its "
                          "password (" +
                          what + ")");
      }
      throw LaunchError("cannot reach etcd at " + endpoints_text_ +
                        " (--rdzv_endpoint, --rdzv_backend=etcd): " + what);
    }
    // Waits for node 0 are bounded by the join timeout; the link's by the
    // heartbeat timeout (StartWatch).
    etcd_->set_timeout(options_.rendezvous_timeout);
    // Before it can be in the record: a record whose launchers all lack this
    // key (their leases ran out) is abandoned.
    try {
      etcd_->Set(PresenceKey(identity()), "1");
    } catch (const StoreError& error) {
      throw LaunchError("lost etcd at " + endpoints_text_ +
                        " (--rdzv_endpoint) while joining the run: " + error.what());
    }
  }

  bool Abandoned(const RunRecord& record) override {
    for (const std::vector<RunMember>* list : {&record.members, &record.waiting}) {
      for (const RunMember& member : *list) {
        if (etcd_->Check({PresenceKey(member.owner)})) return false;
      }
    }
    return true;
  }

  // Shutdown already did this; a watch must never call into a handler gone.
  ~EtcdRendezvous() override {
    if (etcd_) etcd_->StopBackground();
  }

  Store& store() override { return *etcd_; }

  // The first node to arrive writes the run's configuration (a transaction:
  // only one can).
  AgreedConfig AgreeOnConfig(const std::string& mine) override {
    return {etcd_->CompareSet(Key("config"), "", mine), "the run", "the first node"};
  }

  RunRecordStore& records() override { return *records_; }

  void Announce(RendezvousWorld* world) override {
    if (world->node_rank == 0) HostRanksStore();
    etcd_->Set(AliveKey(round_, world->node_rank), identity());
    world->store_addr = etcd_->Get(RoundKey(round_, "store_addr"));
    world->store_port =
        static_cast<uint16_t>(std::stoi(etcd_->Get(RoundKey(round_, "store_port"))));
    world->master_addr = etcd_->Get(RoundKey(round_, "master_addr"));
    world->master_port =
        static_cast<uint16_t>(std::stoi(etcd_->Get(RoundKey(round_, "master_port"))));
  }

  bool hosts_store() const override { return ranks_server_ != nullptr; }

  void EnterRound(int round, int) override {
    std::lock_guard lock(mutex_);
    round_ = round;
    alive_owner_.erase(alive_owner_.begin(), alive_owner_.lower_bound({round, 0}));
    expired_.clear();
    reported_.clear();
  }

  // The launchers meet in etcd, not in the ranks' store: nothing to move.

  milliseconds StartWatch(std::function<void()> on_change) override {
    etcd_->set_timeout(options_.heartbeat_timeout);
    on_change_ = std::move(on_change);
    // The watch's thread belongs to the store, which Shutdown stops first.
    etcd_->Watch("", [this](const EtcdEvent& event) { Observe(event); });
    // Who announced before the watch began (the message of a loss names it).
    for (const auto& [key, value] : etcd_->List("alive/")) {
      std::lock_guard lock(mutex_);
      alive_owner_.try_emplace(AliveNode(key), value);
    }
    return kQuietReadPeriod;
  }

  // This node's own lease first (it stalled longer than the lease lives),
  // then the nodes whose lease expired before they said goodbye.
  // The owners come from the alive keys' values (each on its owner's lease).
  MembershipChange Watch(const std::vector<std::string>&) override {
    if (!etcd_->lease_alive()) {
      throw StoreError(
          "this node's etcd lease expired (its infini_run stalled for "
          "longer than --rdzv_conf=heartbeat_timeout=" +
          Seconds(options_.heartbeat_timeout) + ")");
    }
    MembershipChange change;
    std::lock_guard lock(mutex_);
    for (int node : expired_) {
      change.lost.push_back({node,
                             "node " + std::to_string(node) + " lost: its infini_run (" +
                                 alive_owner_[{round_, node}] +
                                 ") let its etcd lease expire: no keep-alive for " +
                                 Seconds(options_.heartbeat_timeout) +
                                 " (it died or stalled; --rdzv_conf=heartbeat_timeout)",
                             alive_owner_[{round_, node}]});
    }
    reported_.insert(expired_.begin(), expired_.end());
    expired_.clear();
    return change;
  }

  std::string Describe() const override {
    return "etcd at " + endpoints_text_ + " (--rdzv_endpoint)";
  }

  LaunchError JoinError(const StoreError& error) const override {
    if (dynamic_cast<const rendezvous::StoreTimeoutError*>(&error)) {
      return LaunchError("timed out after " + Seconds(options_.rendezvous_timeout) +
                         " waiting for node 0 on etcd at " + endpoints_text_ +
                         " (--rdzv_timeout); is node 0's infini_run running? (" + error.what() +
                         ")");
    }
    return LaunchError("lost etcd at " + endpoints_text_ +
                       " (--rdzv_endpoint) while joining the run: " + error.what());
  }

  // The others have left, or their keys expire with their leases.
  void RemoveRun() override {
    {
      std::lock_guard lock(mutex_);
      removing_ = true;  // the deletions that follow are no node's loss
      expired_.clear();
    }
    etcd_->DeleteAll();
  }

  // No thread may be inside libcurl when the process exits (its and
  // OpenSSL's exit-time cleanup would pull the ground from under it): the
  // link thread ends (bounded by one request's timeout), then the store's
  // lease and watch threads.
  void Shutdown(const std::function<void(milliseconds)>& wait_for_link) override {
    if (etcd_) {
      wait_for_link(kLinkStopBound);
      records_->StopBackground();
      etcd_->StopBackground();
    }
    ranks_server_.reset();
  }

 private:
  static std::string PresenceKey(const std::string& owner) { return Key("present/" + owner); }

  // "alive/<node>" in round 0, "alive/<round>/<node>" after (no
  // "infini_run/": the lease's keys).
  static std::string AliveKey(int round, int node) {
    return "alive/" + (round == 0 ? "" : std::to_string(round) + "/") + std::to_string(node);
  }

  // (round, node) of "alive/<node>" (round 0) or "alive/<round>/<node>",
  // with or without the store's prefix before it.
  static std::pair<int, int> AliveNode(const std::string& key) {
    const size_t at = key.rfind("alive/");
    const std::string rest = at == std::string::npos ? key : key.substr(at + 6);
    const size_t slash = rest.find('/');
    if (slash == std::string::npos) return {0, std::atoi(rest.c_str())};
    return {std::atoi(rest.c_str()), std::atoi(rest.c_str() + slash + 1)};
  }

  // Node 0: the ranks' store stays on node 0's launcher (an elastic round's
  // node 0 keeps the one it hosts, or hosts one when the old node 0 is gone).
  void HostRanksStore() {
    if (ranks_server_) {
      PublishRanksStore();
      return;
    }
    const std::string bind_addr = options_.local_addr.empty() ? "0.0.0.0" : options_.local_addr;
    const std::string published = options_.local_addr.empty() ? HostName() : options_.local_addr;
    TcpStoreServerOptions server_options;
    server_options.host = bind_addr;
    server_options.port = 0;
    server_options.token = options_.run_token;
    try {
      ranks_server_ = TcpStoreServer::Start(server_options);
    } catch (const StoreError& error) {
      throw LaunchError("node 0 cannot host the ranks' store on " + bind_addr +
                        " (--local_addr): " + error.what());
    }
    ranks_store_addr_ = published;
    PublishRanksStore();
  }

  void PublishRanksStore() {
    const std::string bind_addr = options_.local_addr.empty() ? "0.0.0.0" : options_.local_addr;
    etcd_->Set(RoundKey(round_, "store_addr"), ranks_store_addr_);
    etcd_->Set(RoundKey(round_, "store_port"), std::to_string(ranks_server_->port()));
    etcd_->Set(RoundKey(round_, "master_addr"), ranks_store_addr_);
    etcd_->Set(RoundKey(round_, "master_port"), std::to_string(PickFreePort(bind_addr)));
  }

  // The watch's view of the run's keys (on the watch's thread).
  void Observe(const EtcdEvent& event) {
    {
      std::lock_guard lock(mutex_);
      if (removing_) return;  // node 0's own removal of every key
      if (event.key.rfind("alive/", 0) == 0) {
        // Owners of every round (a round's members may announce before this
        // node enters it); losses of this round only.
        const std::pair<int, int> round_node = AliveNode(event.key);
        const int node = round_node.second;
        if (!event.deleted) {
          // A new owner (a replacement, --on_failure=shrink) is watched afresh.
          if (round_node.first == round_ && alive_owner_[round_node] != event.value) {
            reported_.erase(node);
          }
          alive_owner_[round_node] = event.value;
        } else if (round_node.first == round_ && !reported_.count(node)) {
          // Its lease ran out, or it left once the run's outcome was read:
          // the record's transitions ignore a loss after the outcome.
          expired_.insert(node);
        }
      }
    }
    on_change_();
  }

  const LaunchOptions options_;
  std::string endpoints_text_;  // "host:port,host:port", for messages
  std::unique_ptr<EtcdStore> etcd_;
  // The record, on a connection of its own without a lease: it outlives
  // whichever launcher wrote it last.
  std::unique_ptr<RunRecordStore> records_;
  std::unique_ptr<TcpStoreServer> ranks_server_;  // node 0
  std::string ranks_store_addr_;                  // its published address
  std::function<void()> on_change_;               // set before the watch starts

  std::mutex mutex_;
  // Guarded by mutex_: what the watch saw.
  std::map<std::pair<int, int>, std::string> alive_owner_;  // (round, node) -> host:pid
  std::set<int> expired_;                                   // leases expired, not yet reported
  std::set<int> reported_;                                  // reported lost
  bool removing_ = false;                                   // node 0 is removing the run's keys
  int round_ = 0;                                           // the round whose keys this node uses
};

}  // namespace

std::shared_ptr<RendezvousHandler> MakeEtcdRendezvous(const LaunchOptions& options) {
  return std::make_shared<EtcdRendezvous>(options);
}

}  // namespace infini::launch
