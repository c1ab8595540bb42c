// Launcher-to-launcher protocol over the TCP store. Keys (all under
// "infini_run/"; one store serves one run):
//   config                  written by the host (node 0): what every node must match
//   master_addr, master_port  the ranks' MASTER_ADDR/MASTER_PORT, chosen on node 0
//   joined                  counter handing out node ranks in join order
//   node/<r>/owner          "host:pid" of the node that claimed rank r
//   heartbeat/<r>           counter node r's link thread increments
//   attempt/<k>/ready/<r>   node r is ready to start attempt k
//   attempt/<k>/restart     a node failed in attempt k: everyone restarts
//   attempt/<k>/done/<r>    node r's ranks all succeeded in attempt k
//   failure                 "status\nnode\nmessage": the run stops
//   left/<host:pid>         that node is about to exit (the host waits for it)
// On etcd (--rdzv_backend=etcd) the same keys live under the run's prefix
// (EtcdRunPrefix: run id and a hash of the run's secret), each written with
// its writer's lease, and also:
//   alive/<r>               "host:pid" of node r, on node r's lease: its
//                           deletion (lease expired) is how the others learn
//                           that node r died or stalled
//   store_addr, store_port  the ranks' store, still hosted by node 0
// Heartbeat counters are not used there; the link thread reads when its
// watch on the run's prefix reports a change.
#include "infini/launch/node_rendezvous.h"

#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "infini/launch/net_util.h"
#include "infini/launch/signal_watcher.h"
#include "infini/rendezvous/etcd_store.h"
#include "infini/rendezvous/tcp_store.h"

namespace infini::launch {
namespace {

using Clock = std::chrono::steady_clock;
using rendezvous::ConnectProgress;
using rendezvous::ConnectWait;
using rendezvous::EtcdEvent;
using rendezvous::EtcdStore;
using rendezvous::EtcdStoreOptions;
using rendezvous::Store;
using rendezvous::StoreError;
using rendezvous::StoreHandshakeError;
using rendezvous::TcpStoreClient;
using rendezvous::TcpStoreServer;
using rendezvous::TcpStoreServerOptions;
using std::chrono::milliseconds;

constexpr char kPrefix[] = "infini_run/";
// How long the host keeps the store up for nodes that still have to read the
// outcome, and a leaving node waits for its last writes.
constexpr milliseconds kHostLinger{5000};
constexpr milliseconds kWriteFlushBound{2000};
// Poll step of the supervising thread's waits: signals are seen at once
// (the signal pipe wakes the poll), snapshots within this.
constexpr milliseconds kWaitStep{20};
// On etcd the link thread reads when its watch reports a change; this is only
// the period of a read that no change prompted.
constexpr milliseconds kEtcdQuietReadPeriod{2000};
// How long the launcher's end waits for the link thread's last etcd request.
constexpr milliseconds kEtcdLinkStopBound{6000};

std::string Key(const std::string& name) { return kPrefix + name; }
std::string AttemptKey(int attempt, const std::string& name) {
  return Key("attempt/" + std::to_string(attempt) + "/" + name);
}
std::string NodeKeys(const std::string& kind, int node) {
  return Key(kind + "/" + std::to_string(node));
}

// The fields every node must agree on, in the order they are checked.
std::vector<std::pair<std::string, std::string>> ConfigFields(const LaunchOptions& options) {
  return {{"rdzv_id", options.run_id},
          {"nnodes", std::to_string(options.nnodes)},
          {"nproc_per_node", std::to_string(options.processes_per_node)},
          {"ccl_backend", options.ccl_backend},
          {"max_restarts", std::to_string(options.max_restarts)}};
}

std::string EncodeConfig(const LaunchOptions& options) {
  std::string encoded;
  for (const auto& [name, value] : ConfigFields(options)) encoded += name + "=" + value + "\n";
  return encoded;
}

std::string FieldOf(const std::string& encoded, const std::string& name) {
  std::istringstream lines(encoded);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "=", 0) == 0) return line.substr(name.size() + 1);
  }
  return "";
}

std::string EncodeFailure(int exit_status, int node, const std::string& message) {
  return std::to_string(exit_status) + "\n" + std::to_string(node) + "\n" + message;
}

PeerFailure DecodeFailure(const std::string& encoded) {
  std::istringstream fields(encoded);
  PeerFailure failure;
  std::string line;
  std::getline(fields, line);
  failure.exit_status = std::atoi(line.c_str());
  std::getline(fields, line);
  failure.node_rank = std::atoi(line.c_str());
  std::getline(fields, failure.message);
  return failure;
}

// Sleeps up to `duration`, waking (and throwing) on SIGINT/SIGTERM/SIGHUP.
void SleepUnlessSignalled(milliseconds duration) {
  pollfd entry{SignalWatcher::fd(), POLLIN, 0};
  if (poll(&entry, 1, static_cast<int>(duration.count())) > 0) {
    for (int signal_number : SignalWatcher::TakeSignals()) {
      if (signal_number != SIGCHLD) throw Interrupted(signal_number);
    }
  }
}

std::string Seconds(milliseconds duration) {
  std::ostringstream text;
  text << static_cast<double>(duration.count()) / 1000 << " s";
  return text.str();
}

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
  progress.report = [timeout](const ConnectWait& wait) {
    fprintf(stderr,
            "infini_run: waiting for node 0's rendezvous store at %s (--rdzv_endpoint or "
            "--master_addr/--master_port) since %s, %lld s ago (last try: %s); gives up at %s, "
            "in %lld s (--rdzv_timeout %s)\n",
            wait.endpoint.c_str(), ClockTime(wait.since).c_str(),
            static_cast<long long>((wait.waited.count() + 500) / 1000),
            OneLine(wait.last_failure).c_str(),
            ClockTime(wait.since + wait.waited + wait.left).c_str(),
            static_cast<long long>((wait.left.count() + 999) / 1000), Seconds(timeout).c_str());
  };
  return progress;
}

}  // namespace

// The store connection and what was last read through it; shared by the
// supervising thread (snapshots, queued writes) and the link thread (all
// network calls). Held by shared_ptr so that a link thread stuck in a call
// to a stalled store can be left behind safely.
struct StoreLink {
  // Set before the thread starts, then read-only.
  std::unique_ptr<Store> store;
  EtcdStore* etcd = nullptr;  // the same store, when it is etcd
  int nnodes = 1;
  int node_rank = 0;
  bool is_host = false;
  milliseconds monitor_interval{100};
  milliseconds heartbeat_timeout{15000};
  std::string endpoint;

  std::mutex mutex;
  std::condition_variable wake;
  // Guarded by mutex: requests from the supervising thread...
  std::deque<std::function<void(Store&)>> writes;
  int writes_in_flight = 0;
  int watched_attempt = 0;
  bool stop = false;
  // ...and what the link thread saw.
  std::optional<PeerFailure> failure;
  std::map<int, bool> restart_by_attempt;
  bool all_ready = false;
  bool all_done = false;
  bool all_left = false;
  std::string missing_ready;  // node ranks, for the timeout message
  std::string lost;           // the store failed: why
  std::set<int> lost_nodes;   // host: nodes that stopped heartbeating
  // etcd: what the watch saw.
  uint64_t changes_seen = 0;
  std::map<int, std::string> alive_owner;  // node rank -> host:pid
  std::set<std::string> left_owners;
  std::set<int> expired_nodes;  // leases expired, failure not yet published
  bool run_removed = false;     // host: the run's keys are being removed
  bool started = false;         // StartLink ran: a thread runs Run
  bool finished = false;        // Run returned

  void Post(std::function<void(Store&)> write) {
    {
      std::lock_guard lock(mutex);
      writes.push_back(std::move(write));
    }
    wake.notify_all();
  }

  void Run() {
    RunUntilStopped();
    {
      std::lock_guard lock(mutex);
      finished = true;
    }
    wake.notify_all();
  }

  void RunUntilStopped() {
    std::map<int, std::pair<int64_t, Clock::time_point>> heartbeats;  // host: last value, when
    const milliseconds heartbeat_interval =
        std::max(milliseconds(50), std::min(heartbeat_timeout / 4, milliseconds(5000)));
    Clock::time_point next_heartbeat = Clock::now();
    try {
      while (true) {
        int attempt;
        {
          std::unique_lock lock(mutex);
          if (stop && writes.empty()) return;
          attempt = watched_attempt;
        }
        RunWrites();
        const Clock::time_point now = Clock::now();
        if (etcd) {
          PublishExpiredNodes();
        } else if (now >= next_heartbeat) {
          store->Add(NodeKeys("heartbeat", node_rank), 1);
          if (is_host) CheckHeartbeats(&heartbeats);
          next_heartbeat = now + heartbeat_interval;
        }
        uint64_t changes_read;
        {
          std::lock_guard lock(mutex);
          changes_read = changes_seen;
        }
        ReadPeers(attempt);
        std::unique_lock lock(mutex);
        wake.wait_for(lock, etcd ? kEtcdQuietReadPeriod : monitor_interval, [&] {
          return stop || !writes.empty() || changes_seen != changes_read ||
                 !expired_nodes.empty() || watched_attempt != attempt;
        });
      }
    } catch (const StoreError& error) {
      std::lock_guard lock(mutex);
      lost = error.what();
      writes.clear();
    }
  }

  void RunWrites() {
    while (true) {
      std::function<void(Store&)> write;
      {
        std::lock_guard lock(mutex);
        if (writes.empty()) return;
        write = std::move(writes.front());
        writes.pop_front();
        ++writes_in_flight;
      }
      write(*store);
      std::lock_guard lock(mutex);
      --writes_in_flight;
    }
  }

  void ReadPeers(int attempt) {
    std::optional<PeerFailure> seen_failure;
    if (store->Check({Key("failure")})) seen_failure = DecodeFailure(store->Get(Key("failure")));
    const bool restart = store->Check({AttemptKey(attempt, "restart")});
    std::vector<std::string> ready, done;
    for (int node = 0; node < nnodes; ++node) {
      ready.push_back(AttemptKey(attempt, "ready/" + std::to_string(node)));
      done.push_back(AttemptKey(attempt, "done/" + std::to_string(node)));
    }
    const bool every_ready = store->Check(ready);
    std::string missing;
    if (!every_ready) {
      for (int node = 0; node < nnodes && node < 64; ++node) {
        if (!store->Check({ready[static_cast<size_t>(node)]})) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(node);
        }
      }
    }
    const bool every_done = store->Check(done);
    bool every_left = true;
    if (is_host) {
      for (int node = 0; node < nnodes && every_left; ++node) {
        const std::string owner_key = NodeKeys("node", node) + "/owner";
        if (node == node_rank || !store->Check({owner_key})) continue;
        {
          std::lock_guard lock(mutex);
          if (lost_nodes.count(node)) continue;  // it will never say goodbye
        }
        every_left = store->Check({Key("left/" + store->Get(owner_key))});
      }
    }
    std::lock_guard lock(mutex);
    if (seen_failure) failure = seen_failure;
    restart_by_attempt[attempt] = restart;
    if (watched_attempt != attempt) return;  // read for an attempt no longer watched
    all_ready = every_ready;
    missing_ready = missing;
    all_done = every_done;
    all_left = every_left;
  }

  // etcd: the watch's view of the run's keys (called on the watch's thread).
  void Observe(const EtcdEvent& event) {
    {
      std::lock_guard lock(mutex);
      if (run_removed) return;  // the host's own removal of every key
      ++changes_seen;
      if (event.key.rfind(Key("left/"), 0) == 0 && !event.deleted) {
        left_owners.insert(event.key.substr(Key("left/").size()));
      } else if (event.key.rfind("alive/", 0) == 0) {
        const int node = std::atoi(event.key.c_str() + 6);
        if (!event.deleted) {
          alive_owner[node] = event.value;
        } else if (!left_owners.count(alive_owner[node]) && !lost_nodes.count(node)) {
          expired_nodes.insert(node);  // its lease ran out before it said goodbye
        }
      }
    }
    wake.notify_all();
  }

  // etcd: tells every node about the nodes whose lease expired; first, this
  // node's own lease (it stalled longer than the lease lives).
  void PublishExpiredNodes() {
    if (!etcd->lease_alive()) {
      throw rendezvous::StoreError(
          "this node's etcd lease expired (its infini_run stalled for "
          "longer than --rdzv_conf=heartbeat_timeout=" +
          Seconds(heartbeat_timeout) + ")");
    }
    std::set<int> expired;
    std::map<int, std::string> owners;
    {
      std::lock_guard lock(mutex);
      expired.swap(expired_nodes);
      lost_nodes.insert(expired.begin(), expired.end());
      owners = alive_owner;
    }
    for (int node : expired) {
      store->CompareSet(
          Key("failure"), "",
          EncodeFailure(1, node,
                        "node " + std::to_string(node) + " lost: its infini_run (" + owners[node] +
                            ") let its etcd lease expire: no keep-alive for " +
                            Seconds(heartbeat_timeout) +
                            " (it died or stalled; --rdzv_conf=heartbeat_timeout)"));
    }
  }

  // Host only: a node whose counter did not move for heartbeat_timeout is
  // lost; the host tells every node through the failure key.
  void CheckHeartbeats(std::map<int, std::pair<int64_t, Clock::time_point>>* heartbeats) {
    const Clock::time_point now = Clock::now();
    for (int node = 0; node < nnodes; ++node) {
      if (node == node_rank || !store->Check({NodeKeys("heartbeat", node)})) continue;
      const int64_t count = store->Add(NodeKeys("heartbeat", node), 0);
      auto [entry, inserted] = heartbeats->try_emplace(node, count, now);
      if (inserted || entry->second.first != count) {
        entry->second = {count, now};
        continue;
      }
      if (now - entry->second.second < heartbeat_timeout) continue;
      {
        std::lock_guard lock(mutex);
        lost_nodes.insert(node);
      }
      const std::string owner_key = NodeKeys("node", node) + "/owner";
      std::string owner = store->Check({owner_key}) ? store->Get(owner_key) : "?";
      store->CompareSet(
          Key("failure"), "",
          EncodeFailure(1, node,
                        "node " + std::to_string(node) + " lost: its infini_run (" + owner +
                            ") sent no heartbeat for " + Seconds(heartbeat_timeout) +
                            " (it died or stalled; "
                            "--rdzv_conf=heartbeat_timeout)"));
    }
  }
};

std::unique_ptr<NodeRendezvous> NodeRendezvous::Establish(const LaunchOptions& options) {
  std::unique_ptr<NodeRendezvous> node(new NodeRendezvous());
  node->options_ = options;
  node->my_identity_ = HostName() + ":" + std::to_string(getpid());
  node->store_addr_ = options.rendezvous_host;
  node->store_port_ = options.rendezvous_port;
  node->master_addr_ = options.rendezvous_host;
  node->node_rank_ = options.node_rank;  // -1 until claimed when not given

  if (!options.multi_node()) {
    // Ranks are local: the store and MASTER_ADDR are loopback.
    TcpStoreServerOptions server_options;
    server_options.host = "127.0.0.1";
    server_options.port = options.rendezvous_port;
    server_options.token = options.run_token;
    try {
      node->server_ = TcpStoreServer::Start(server_options);
    } catch (const StoreError& error) {
      throw LaunchError("cannot host the launcher's store on 127.0.0.1:" +
                        std::to_string(options.rendezvous_port) +
                        " (--rdzv_endpoint/--master_port): " + error.what());
    }
    node->store_addr_ = "127.0.0.1";
    node->store_port_ = node->server_->port();
    node->master_addr_ = "127.0.0.1";
    node->master_port_ = PickFreePort("127.0.0.1");
    node->node_rank_ = 0;
    return node;
  }

  node->link_ = std::make_shared<StoreLink>();
  if (options.rendezvous_on_etcd) {
    node->MeetOnEtcd(options);
    return node;
  }
  if (options.node_rank < 0 && IsLocalHost(options.rendezvous_host)) {
    // Whoever binds the endpoint first hosts it (torchrun's c10d style).
    try {
      node->Host(options);
    } catch (const LaunchError&) {
      node->server_.reset();
      node->Join(options);
    }
  } else if (options.node_rank == 0) {
    node->Host(options);
  } else {
    node->Join(options);
  }
  node->ClaimNodeRank(options);
  Store& store = *node->link_->store;
  store.Set(NodeKeys("node", node->node_rank_) + "/host", HostName());
  node->master_addr_ = store.Get(Key("master_addr"));
  node->master_port_ = static_cast<uint16_t>(std::stoi(store.Get(Key("master_port"))));
  return node;
}

void NodeRendezvous::MeetOnEtcd(const LaunchOptions& options) {
  EtcdStoreOptions etcd_options;
  etcd_options.endpoints = options.etcd_endpoints;
  etcd_options.key_prefix = rendezvous::EtcdRunPrefix(options.run_id, options.run_token);
  etcd_options.lease_ttl = options.heartbeat_timeout;
  etcd_options.request_timeout =
      std::min(milliseconds(5000), std::max(milliseconds(500), options.heartbeat_timeout / 2));
  const char* user = getenv("INFINI_ETCD_USER");
  const char* password = getenv("INFINI_ETCD_PASSWORD");
  etcd_options.user = user ? user : "";
  etcd_options.password = password ? password : "";
  std::unique_ptr<EtcdStore> etcd;
  try {
    etcd = EtcdStore::Connect(etcd_options);
  } catch (const StoreError& error) {
    const std::string what = error.what();
    // etcd's own authentication: name the variables that carry the login.
    if (what.find("user name is empty") != std::string::npos) {
      throw LaunchError(
          "etcd at " + EtcdEndpointsText() +
          " (--rdzv_endpoint) has authentication on and INFINI_ETCD_USER is not "
          "set: expected INFINI_ETCD_USER and INFINI_ETCD_PASSWORD of an etcd user (" +
          what + ")");
    }
    if (what.find("authentication failed") != std::string::npos) {
      throw LaunchError(
          "etcd at " + EtcdEndpointsText() + " (--rdzv_endpoint) refused INFINI_ETCD_USER='" +
          OneLine(etcd_options.user) +
          "' and its INFINI_ETCD_PASSWORD: expected an etcd user and its password (" + what + ")");
    }
    throw LaunchError("cannot reach etcd at " + EtcdEndpointsText() +
                      " (--rdzv_endpoint, --rdzv_backend=etcd): " + what);
  }
  link_->etcd = etcd.get();
  link_->store = std::move(etcd);
  Store& store = *link_->store;
  // Waits for node 0 are bounded by the join timeout; the link's by the
  // heartbeat timeout (set in StartLink).
  store.set_timeout(options.rendezvous_timeout);
  try {
    AgreeOnEtcd(options);
    ClaimNodeRank(options);
    if (node_rank_ == 0) HostRanksStore(options);
    store.Set("alive/" + std::to_string(node_rank_), my_identity_);
    store.Set(NodeKeys("node", node_rank_) + "/host", HostName());
    store_addr_ = store.Get(Key("store_addr"));
    store_port_ = static_cast<uint16_t>(std::stoi(store.Get(Key("store_port"))));
    master_addr_ = store.Get(Key("master_addr"));
    master_port_ = static_cast<uint16_t>(std::stoi(store.Get(Key("master_port"))));
  } catch (const rendezvous::StoreTimeoutError& error) {
    throw LaunchError("timed out after " + Seconds(options.rendezvous_timeout) +
                      " waiting for node 0 on etcd at " + EtcdEndpointsText() +
                      " (--rdzv_timeout); is node 0's infini_run running? (" + error.what() + ")");
  } catch (const StoreError& error) {
    throw LaunchError("lost etcd at " + EtcdEndpointsText() +
                      " (--rdzv_endpoint) while joining the run: " + error.what());
  }
}

// The first node to arrive writes the run's configuration (a transaction:
// only one can); every other node compares its own with it.
void NodeRendezvous::AgreeOnEtcd(const LaunchOptions& options) {
  const std::string mine = EncodeConfig(options);
  const std::string agreed = link_->store->CompareSet(Key("config"), "", mine);
  if (agreed == mine) return;
  const std::string me = options.node_rank >= 0 ? "node " + std::to_string(options.node_rank)
                                                : "the node " + my_identity_;
  for (const auto& [name, value] : ConfigFields(options)) {
    const std::string theirs = FieldOf(agreed, name);
    if (theirs == value) continue;
    const std::string message = me + " disagrees with the run on --" + name +
                                ": the first node has '" + OneLine(theirs) + "', " + me + " has '" +
                                OneLine(value) + "'";
    PublishDirect(0, false, 1, message);
    throw LaunchError(message);
  }
}

// Node 0 on etcd: the ranks' store stays on node 0's launcher, so that etcd
// carries the launchers' traffic only.
void NodeRendezvous::HostRanksStore(const LaunchOptions& options) {
  const std::string bind_addr = options.local_addr.empty() ? "0.0.0.0" : options.local_addr;
  const std::string published = options.local_addr.empty() ? HostName() : options.local_addr;
  TcpStoreServerOptions server_options;
  server_options.host = bind_addr;
  server_options.port = 0;
  server_options.token = options.run_token;
  try {
    server_ = TcpStoreServer::Start(server_options);
  } catch (const StoreError& error) {
    throw LaunchError("node 0 cannot host the ranks' store on " + bind_addr +
                      " (--local_addr): " + error.what());
  }
  Store& store = *link_->store;
  store.Set(Key("store_addr"), published);
  store.Set(Key("store_port"), std::to_string(server_->port()));
  store.Set(Key("master_addr"), published);
  store.Set(Key("master_port"), std::to_string(PickFreePort(bind_addr)));
}

std::string NodeRendezvous::EtcdEndpointsText() const {
  std::string text;
  for (const std::string& endpoint : options_.etcd_endpoints) {
    text += (text.empty() ? "" : ",") + endpoint;
  }
  return text;
}

std::string NodeRendezvous::StoreDescription() const {
  if (options_.rendezvous_on_etcd) return "etcd at " + EtcdEndpointsText() + " (--rdzv_endpoint)";
  return "the rendezvous store at " + store_addr_ + ":" + std::to_string(store_port_) +
         " (node 0's infini_run died or stalled)";
}

void NodeRendezvous::Host(const LaunchOptions& options) {
  TcpStoreServerOptions server_options;
  server_options.host = options.rendezvous_host;  // the address it is given
  server_options.port = options.rendezvous_port;
  server_options.token = options.run_token;
  try {
    server_ = TcpStoreServer::Start(server_options);
  } catch (const StoreError& error) {
    throw LaunchError("node 0 cannot host the rendezvous store at " + options.rendezvous_host +
                      ":" + std::to_string(options.rendezvous_port) +
                      " (--rdzv_endpoint): " + error.what());
  }
  link_->store = TcpStoreClient::Connect(options.rendezvous_host, server_->port(),
                                         options.rendezvous_timeout, options.run_token);
  link_->store->set_timeout(options.heartbeat_timeout);
  link_->store->Set(Key("config"), EncodeConfig(options));
  link_->store->Set(Key("master_addr"),
                    options.local_addr.empty() ? options.rendezvous_host : options.local_addr);
  link_->store->Set(Key("master_port"), std::to_string(PickFreePort(options.rendezvous_host)));
}

void NodeRendezvous::Join(const LaunchOptions& options) {
  const std::string endpoint =
      options.rendezvous_host + ":" + std::to_string(options.rendezvous_port);
  try {
    link_->store = TcpStoreClient::Connect(options.rendezvous_host, options.rendezvous_port,
                                           options.rendezvous_timeout, options.run_token,
                                           JoinWaitReporter(options));
  } catch (const StoreHandshakeError& error) {
    throw LaunchError("the rendezvous endpoint " + endpoint +
                      " (--rdzv_endpoint) answered but is not this run's store: " + error.what());
  } catch (const StoreError& error) {
    throw LaunchError("cannot reach the rendezvous endpoint " + endpoint + " within " +
                      Seconds(options.rendezvous_timeout) +
                      " (--rdzv_endpoint, --rdzv_timeout); is node 0's infini_run running? (" +
                      error.what() + ")");
  }
  // Node 0 answers at once when alive: a stalled node 0 is noticed within
  // the heartbeat timeout.
  link_->store->set_timeout(options.heartbeat_timeout);
  AgreeWithHost(options);
}

void NodeRendezvous::AgreeWithHost(const LaunchOptions& options) {
  std::string host_config;
  try {
    host_config = link_->store->Get(Key("config"));
  } catch (const StoreError& error) {
    throw LaunchError("the rendezvous endpoint " + options.rendezvous_host + ":" +
                      std::to_string(options.rendezvous_port) +
                      " answered but node 0 published no run configuration (" + error.what() + ")");
  }
  std::string me = options.node_rank >= 0 ? "node " + std::to_string(options.node_rank)
                                          : "the node " + my_identity_;
  for (const auto& [name, mine] : ConfigFields(options)) {
    std::string theirs = FieldOf(host_config, name);
    if (theirs == mine) continue;
    std::string message = me + " disagrees with node 0 on --" + name + ": node 0 has '" +
                          OneLine(theirs) + "', " + me + " has '" + OneLine(mine) + "'";
    PublishDirect(0, false, 1, message);
    throw LaunchError(message);
  }
}

void NodeRendezvous::ClaimNodeRank(const LaunchOptions& options) {
  Store& store = *link_->store;
  if (options.node_rank >= 0) {
    node_rank_ = options.node_rank;
  } else if (server_) {
    node_rank_ = 0;  // the host is node 0: MASTER_ADDR is the endpoint host
  } else {
    // On etcd nobody hosts: the first to join is node 0.
    node_rank_ = static_cast<int>(store.Add(Key("joined"), 1)) - (link_->etcd ? 1 : 0);
    if (node_rank_ >= options.nnodes) {
      std::string message = "the node " + my_identity_ + " joined as node " +
                            std::to_string(node_rank_ + 1) +
                            " of --nnodes=" + std::to_string(options.nnodes) + ": too many nodes";
      PublishDirect(0, false, 1, message);
      throw LaunchError(message);
    }
  }
  std::string owner_key = NodeKeys("node", node_rank_) + "/owner";
  std::string owner = store.CompareSet(owner_key, "", my_identity_);
  if (owner != my_identity_) {
    std::string message = "two nodes claim --node_rank=" + std::to_string(node_rank_) + ": " +
                          owner + " and " + my_identity_;
    PublishDirect(0, false, 1, message);
    throw LaunchError(message);
  }
  // From here the host watches this node's heartbeat (on etcd: its lease).
  if (!link_->etcd) store.Add(NodeKeys("heartbeat", node_rank_), 1);
}

void NodeRendezvous::StartLink() {
  if (!link_) return;
  link_->nnodes = options_.nnodes;
  link_->node_rank = node_rank_;
  link_->is_host = server_ != nullptr;
  link_->monitor_interval = options_.monitor_interval;
  link_->heartbeat_timeout = options_.heartbeat_timeout;
  link_->endpoint = store_addr_ + ":" + std::to_string(store_port_);
  if (link_->etcd) {
    link_->store->set_timeout(options_.heartbeat_timeout);
    // The watch's thread belongs to the store, which the link outlives.
    link_->etcd->Watch("", [link = link_.get()](const EtcdEvent& event) { link->Observe(event); });
  }
  link_->started = true;
  std::thread([link = link_] { link->Run(); }).detach();
}

NodeRendezvous::~NodeRendezvous() {
  if (!link_ || !link_->store) return;
  const std::string identity = my_identity_;
  if (!server_) {
    link_->Post([identity](Store& store) { store.Set(Key("left/" + identity), "1"); });
    std::lock_guard lock(link_->mutex);
    link_->stop = true;  // after the queued writes
  }
  // Bounded, and a signal cuts it short: the process is ending. The host
  // keeps its store up until every node has read the outcome and left.
  const auto deadline = Clock::now() + (server_ ? kHostLinger : kWriteFlushBound);
  try {
    while (Clock::now() < deadline) {
      {
        std::lock_guard lock(link_->mutex);
        const bool flushed = link_->writes.empty() && link_->writes_in_flight == 0;
        if (!link_->lost.empty() || (flushed && (!server_ || link_->all_left))) break;
      }
      SleepUnlessSignalled(kWaitStep);
    }
  } catch (const Interrupted&) {
  }
  if (server_ && link_->etcd) RemoveRunFromEtcd();
  {
    std::lock_guard lock(link_->mutex);
    link_->stop = true;
  }
  link_->wake.notify_all();
  if (link_->etcd) StopEtcdThreads();
}

// No thread may be inside libcurl when the process exits (its and OpenSSL's
// exit-time cleanup would pull the ground from under it): the link thread
// ends (bounded by one request's timeout), then the store's lease and watch
// threads.
void NodeRendezvous::StopEtcdThreads() {
  {
    std::unique_lock lock(link_->mutex);
    link_->wake.wait_for(lock, kEtcdLinkStopBound,
                         [&] { return !link_->started || link_->finished; });
  }
  link_->etcd->StopBackground();
}

// Node 0 on etcd, last: the run's keys go (the others have left, or their
// keys expire with their leases).
void NodeRendezvous::RemoveRunFromEtcd() {
  {
    std::lock_guard lock(link_->mutex);
    link_->run_removed = true;
  }
  link_->Post([](Store& store) { static_cast<EtcdStore&>(store).DeleteAll(); });
  const auto deadline = Clock::now() + kWriteFlushBound;
  try {
    while (Clock::now() < deadline) {
      {
        std::lock_guard lock(link_->mutex);
        if (!link_->lost.empty() || (link_->writes.empty() && link_->writes_in_flight == 0)) return;
      }
      SleepUnlessSignalled(kWaitStep);
    }
  } catch (const Interrupted&) {
  }
}

std::string NodeRendezvous::LostMessage(const std::string& while_doing) {
  return "lost " + StoreDescription() + " while " + while_doing + ": " + StoreLost();
}

void NodeRendezvous::WaitAllNodesReady(int attempt) {
  if (!link_) return;
  {
    std::lock_guard lock(link_->mutex);
    link_->watched_attempt = attempt;
    link_->all_ready = false;
    link_->all_done = false;
  }
  const std::string key = AttemptKey(attempt, "ready/" + std::to_string(node_rank_));
  link_->Post([key](Store& store) { store.Set(key, "1"); });
  const std::string doing = "waiting for every node to start attempt " + std::to_string(attempt);
  const auto deadline = Clock::now() + options_.rendezvous_timeout;
  while (true) {
    {
      std::lock_guard lock(link_->mutex);
      if (link_->failure) {
        const PeerFailure& failure = *link_->failure;
        throw LaunchError((failure.node_rank >= 0 ? "node " + std::to_string(failure.node_rank)
                                                  : std::string("a joining node")) +
                          " stopped the run while " + doing + ": " + failure.message);
      }
      if (!link_->lost.empty()) break;
      if (link_->all_ready && link_->watched_attempt == attempt) return;
      if (Clock::now() >= deadline) {
        throw LaunchError("timed out after " + Seconds(options_.rendezvous_timeout) + " " + doing +
                          " (--rdzv_timeout); missing node(s) " + link_->missing_ready);
      }
    }
    SleepUnlessSignalled(kWaitStep);
  }
  throw LaunchError(LostMessage(doing));
}

std::optional<PeerFailure> NodeRendezvous::PeerFailed() {
  if (!link_) return std::nullopt;
  std::lock_guard lock(link_->mutex);
  return link_->failure;
}

bool NodeRendezvous::RestartRequested(int attempt) {
  if (!link_) return false;
  std::lock_guard lock(link_->mutex);
  auto found = link_->restart_by_attempt.find(attempt);
  return found != link_->restart_by_attempt.end() && found->second;
}

std::string NodeRendezvous::StoreLost() {
  if (!link_) return "";
  std::lock_guard lock(link_->mutex);
  return link_->lost;
}

void NodeRendezvous::PublishFailure(int attempt, bool restart, int exit_status,
                                    const std::string& message) {
  if (!link_) return;
  const int node = node_rank_;
  link_->Post([=](Store& store) {
    if (restart) {
      store.CompareSet(AttemptKey(attempt, "restart"), "", std::to_string(node) + "\n" + message);
    } else {
      store.CompareSet(Key("failure"), "", EncodeFailure(exit_status, node, message));
    }
  });
}

void NodeRendezvous::PublishDirect(int attempt, bool restart, int exit_status,
                                   const std::string& message) {
  // During Establish, on the thread that owns the connection.
  try {
    if (restart) {
      link_->store->CompareSet(AttemptKey(attempt, "restart"), "",
                               std::to_string(node_rank_) + "\n" + message);
    } else {
      link_->store->CompareSet(Key("failure"), "", EncodeFailure(exit_status, node_rank_, message));
    }
  } catch (const StoreError&) {
    // The store is gone: the other nodes notice that themselves.
  }
}

NodeRendezvous::FinishOutcome NodeRendezvous::WaitForOtherNodes(
    int attempt, std::optional<PeerFailure>* failure) {
  if (!link_) return FinishOutcome::kAllSucceeded;
  const std::string key = AttemptKey(attempt, "done/" + std::to_string(node_rank_));
  link_->Post([key](Store& store) { store.Set(key, "1"); });
  // No deadline: the other nodes' ranks may legitimately run for days; their
  // heartbeats say whether they are still there.
  while (true) {
    {
      std::lock_guard lock(link_->mutex);
      if ((*failure = link_->failure)) return FinishOutcome::kPeerFailed;
      if (link_->restart_by_attempt[attempt]) return FinishOutcome::kRestart;
      if (link_->all_done && link_->watched_attempt == attempt && link_->writes.empty() &&
          link_->writes_in_flight == 0) {
        return FinishOutcome::kAllSucceeded;
      }
      if (!link_->lost.empty()) break;
    }
    SleepUnlessSignalled(kWaitStep);
  }
  throw LaunchError(LostMessage("waiting for the other nodes to finish"));
}

std::unique_ptr<NodeRendezvous> EstablishWhileWatchingSignals(const LaunchOptions& options) {
  if (!options.multi_node()) return NodeRendezvous::Establish(options);
  struct Outcome {
    std::mutex mutex;
    std::unique_ptr<NodeRendezvous> node;
    std::exception_ptr error;
    bool done = false;
  };
  auto outcome = std::make_shared<Outcome>();
  std::thread([outcome, options] {
    std::unique_ptr<NodeRendezvous> node;
    std::exception_ptr error;
    try {
      node = NodeRendezvous::Establish(options);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(outcome->mutex);
    outcome->node = std::move(node);
    outcome->error = error;
    outcome->done = true;
  }).detach();
  while (true) {
    {
      std::lock_guard lock(outcome->mutex);
      if (outcome->done) {
        if (outcome->error) std::rethrow_exception(outcome->error);
        return std::move(outcome->node);
      }
    }
    SleepUnlessSignalled(kWaitStep);
  }
}

}  // namespace infini::launch
