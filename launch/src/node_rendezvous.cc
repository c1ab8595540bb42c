// Launcher-to-launcher protocol over the TCP store. Keys (all under
// "infini_run/"; one store serves one run):
//   run_id, config          written by the host (node 0): what every node must match
//   master_port             the ranks' MASTER_PORT, picked free on node 0
//   joined                  counter handing out node ranks in join order
//   node/<r>/owner          "host:pid" of the node that claimed rank r
//   attempt/<k>/ready/<r>   node r is ready to start attempt k
//   attempt/<k>/restart     a node failed in attempt k: everyone restarts
//   attempt/<k>/done/<r>    node r's ranks all succeeded in attempt k
//   failure                 "status\nnode\nmessage": a node stopped the run
//   left/<host:pid>         that node is about to exit (the host waits for it)
#include "infini/launch/node_rendezvous.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <sstream>
#include <thread>

#include "infini/launch/net_util.h"
#include "infini/launch/signal_watcher.h"

namespace infini::launch {
namespace {

using Clock = std::chrono::steady_clock;
using rendezvous::StoreError;
using rendezvous::TcpStoreClient;
using rendezvous::TcpStoreServer;

constexpr char kPrefix[] = "infini_run/";
// How long the host keeps the store up for nodes that still have to read the
// outcome before it exits.
constexpr std::chrono::seconds kHostLingerTimeout{5};

std::string Key(const std::string& name) { return kPrefix + name; }
std::string AttemptKey(int attempt, const std::string& name) {
  return Key("attempt/" + std::to_string(attempt) + "/" + name);
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

// Sleeps up to `duration`, waking (and throwing) on SIGINT/SIGTERM/SIGHUP.
void SleepUnlessSignalled(std::chrono::milliseconds duration) {
  pollfd entry{SignalWatcher::fd(), POLLIN, 0};
  if (poll(&entry, 1, static_cast<int>(duration.count())) > 0) {
    for (int signal_number : SignalWatcher::TakeSignals()) {
      if (signal_number != SIGCHLD) throw Interrupted(signal_number);
    }
  }
}

std::string Seconds(std::chrono::milliseconds duration) {
  std::ostringstream text;
  text << static_cast<double>(duration.count()) / 1000 << " s";
  return text.str();
}

}  // namespace

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
    server_options.host = options.rendezvous_port == 0 ? "127.0.0.1" : "0.0.0.0";
    server_options.port = options.rendezvous_port;
    try {
      node->server_ = TcpStoreServer::Start(server_options);
    } catch (const StoreError& error) {
      throw LaunchError("cannot host the launcher's store on port " +
                        std::to_string(options.rendezvous_port) +
                        " (--rdzv_endpoint/--master_port): " + error.what());
    }
    node->store_addr_ = "127.0.0.1";
    node->store_port_ = node->server_->port();
    node->master_addr_ = "127.0.0.1";
    node->master_port_ = PickFreePort();
    node->node_rank_ = 0;
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
  node->store_->Set(Key("node/" + std::to_string(node->node_rank_) + "/host"), HostName());
  node->master_port_ = static_cast<uint16_t>(std::stoi(node->store_->Get(Key("master_port"))));
  return node;
}

NodeRendezvous::~NodeRendezvous() {
  if (!server_) Leave();
  if (!server_ || !store_) return;
  // Keep the store up until the other nodes have read how the run ended.
  auto deadline = Clock::now() + kHostLingerTimeout;
  try {
    std::vector<std::string> keys;  // of the nodes that joined
    for (int node = 0; node < options_.nnodes; ++node) {
      const std::string name = std::to_string(node);
      const std::string owner_key = Key("node/" + name + "/owner");
      if (node != node_rank_ && store_->Check({owner_key})) {
        keys.push_back(Key("left/" + store_->Get(owner_key)));
      }
    }
    while (!store_->Check(keys) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const StoreError&) {
  }
}

void NodeRendezvous::Host(const LaunchOptions& options) {
  TcpStoreServerOptions server_options;
  server_options.host = "0.0.0.0";
  server_options.port = options.rendezvous_port;
  try {
    server_ = TcpStoreServer::Start(server_options);
  } catch (const StoreError& error) {
    throw LaunchError("node 0 cannot host the rendezvous store at port " +
                      std::to_string(options.rendezvous_port) +
                      " (--rdzv_endpoint): " + error.what());
  }
  store_ = TcpStoreClient::Connect("127.0.0.1", server_->port(), options.rendezvous_timeout);
  store_->set_timeout(options.rendezvous_timeout);
  store_->Set(Key("config"), EncodeConfig(options));
  store_->Set(Key("master_port"), std::to_string(PickFreePort()));
}

void NodeRendezvous::Join(const LaunchOptions& options) {
  const std::string endpoint =
      options.rendezvous_host + ":" + std::to_string(options.rendezvous_port);
  try {
    store_ = TcpStoreClient::Connect(options.rendezvous_host, options.rendezvous_port,
                                     options.rendezvous_timeout);
  } catch (const StoreError& error) {
    throw LaunchError("cannot reach the rendezvous endpoint " + endpoint + " within " +
                      Seconds(options.rendezvous_timeout) +
                      " (--rdzv_endpoint, --rdzv_timeout); is node 0's infini_run running? (" +
                      error.what() + ")");
  }
  store_->set_timeout(options.rendezvous_timeout);
  AgreeWithHost(options);
}

void NodeRendezvous::AgreeWithHost(const LaunchOptions& options) {
  std::string host_config;
  try {
    host_config = store_->Get(Key("config"));
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
    std::string message = me + " disagrees with node 0 on --" + name + ": node 0 has '" + theirs +
                          "', " + me + " has '" + mine + "'";
    PublishFailure(0, false, 1, message);
    throw LaunchError(message);
  }
}

void NodeRendezvous::ClaimNodeRank(const LaunchOptions& options) {
  if (options.node_rank >= 0) {
    node_rank_ = options.node_rank;
  } else if (server_) {
    node_rank_ = 0;  // the host is node 0: MASTER_ADDR is the endpoint host
  } else {
    node_rank_ = static_cast<int>(store_->Add(Key("joined"), 1));
    if (node_rank_ >= options.nnodes) {
      std::string message = "the node " + my_identity_ + " joined as node " +
                            std::to_string(node_rank_ + 1) +
                            " of --nnodes=" + std::to_string(options.nnodes) + ": too many nodes";
      PublishFailure(0, false, 1, message);
      throw LaunchError(message);
    }
  }
  std::string owner_key = Key("node/" + std::to_string(node_rank_) + "/owner");
  std::string owner = store_->CompareSet(owner_key, "", my_identity_);
  if (owner != my_identity_) {
    std::string message = "two nodes claim --node_rank=" + std::to_string(node_rank_) + ": " +
                          owner + " and " + my_identity_;
    PublishFailure(0, false, 1, message);
    throw LaunchError(message);
  }
}

void NodeRendezvous::ThrowIfPeerFailed(const std::string& while_doing) {
  if (std::optional<PeerFailure> failure = PeerFailed()) {
    std::string who =
        failure->node_rank >= 0 ? "node " + std::to_string(failure->node_rank) : "a joining node";
    throw LaunchError(who + " stopped the run while " + while_doing + ": " + failure->message);
  }
}

void NodeRendezvous::WaitForKeys(const std::vector<std::string>& keys,
                                 const std::string& while_doing) {
  auto deadline = Clock::now() + options_.rendezvous_timeout;
  try {
    while (true) {
      ThrowIfPeerFailed(while_doing);
      if (store_->Check(keys)) return;
      if (Clock::now() >= deadline) break;
      SleepUnlessSignalled(std::chrono::milliseconds(20));
    }
    std::string missing;
    for (const std::string& key : keys) {
      if (!store_->Check({key}))
        missing += (missing.empty() ? "" : ", ") + key.substr(key.rfind('/') + 1);
    }
    throw LaunchError("timed out after " + Seconds(options_.rendezvous_timeout) + " " +
                      while_doing + " (--rdzv_timeout); missing node(s) " + missing);
  } catch (const StoreError& error) {
    throw LaunchError("lost the rendezvous store at " + store_addr_ + ":" +
                      std::to_string(store_port_) + " while " + while_doing + ": " + error.what());
  }
}

void NodeRendezvous::WaitAllNodesReady(int attempt) {
  if (!options_.multi_node()) return;
  try {
    store_->Set(AttemptKey(attempt, "ready/" + std::to_string(node_rank_)), "1");
  } catch (const StoreError& error) {
    throw LaunchError(std::string("lost the rendezvous store: ") + error.what());
  }
  std::vector<std::string> keys;
  for (int node = 0; node < options_.nnodes; ++node) {
    keys.push_back(AttemptKey(attempt, "ready/" + std::to_string(node)));
  }
  WaitForKeys(keys, "waiting for every node to start attempt " + std::to_string(attempt));
}

std::optional<PeerFailure> NodeRendezvous::PeerFailed() {
  if (!store_ || !store_->Check({Key("failure")})) return std::nullopt;
  std::istringstream fields(store_->Get(Key("failure")));
  PeerFailure failure;
  std::string line;
  std::getline(fields, line);
  failure.exit_status = std::atoi(line.c_str());
  std::getline(fields, line);
  failure.node_rank = std::atoi(line.c_str());
  std::getline(fields, failure.message);
  return failure;
}

bool NodeRendezvous::RestartRequested(int attempt) {
  return store_ && store_->Check({AttemptKey(attempt, "restart")});
}

void NodeRendezvous::PublishFailure(int attempt, bool restart, int exit_status,
                                    const std::string& message) {
  if (!store_) return;
  try {
    if (restart) {
      store_->CompareSet(AttemptKey(attempt, "restart"), "",
                         std::to_string(node_rank_) + "\n" + message);
    } else {
      store_->CompareSet(
          Key("failure"), "",
          std::to_string(exit_status) + "\n" + std::to_string(node_rank_) + "\n" + message);
    }
  } catch (const StoreError&) {
    // The store is gone: the other nodes notice that themselves.
  }
}

NodeRendezvous::FinishOutcome NodeRendezvous::WaitForOtherNodes(
    int attempt, std::optional<PeerFailure>* failure) {
  if (!options_.multi_node()) return FinishOutcome::kAllSucceeded;
  std::vector<std::string> done;
  for (int node = 0; node < options_.nnodes; ++node) {
    done.push_back(AttemptKey(attempt, "done/" + std::to_string(node)));
  }
  try {
    store_->Set(done[static_cast<size_t>(node_rank_)], "1");
    // No deadline: the other nodes' ranks may legitimately run for days.
    while (true) {
      if ((*failure = PeerFailed())) return FinishOutcome::kPeerFailed;
      if (RestartRequested(attempt)) return FinishOutcome::kRestart;
      if (store_->Check(done)) return FinishOutcome::kAllSucceeded;
      SleepUnlessSignalled(options_.monitor_interval);
    }
  } catch (const StoreError& error) {
    throw LaunchError("lost the rendezvous store at " + store_addr_ + ":" +
                      std::to_string(store_port_) +
                      " while waiting for the other nodes to finish: " + error.what());
  }
}

void NodeRendezvous::Leave() {
  if (!store_ || server_) return;
  try {
    store_->Set(Key("left/" + my_identity_), "1");
  } catch (const StoreError&) {
  }
}

}  // namespace infini::launch
