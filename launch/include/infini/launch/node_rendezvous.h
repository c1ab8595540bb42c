// How the launchers of one run meet: node 0 hosts the store, the others join;
// they agree on the run's shape and on node ranks, start each attempt
// together, and tell each other when a node fails or restarts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "infini/launch/options.h"
#include "infini/rendezvous/store.h"
#include "infini/rendezvous/tcp_store.h"

namespace infini::launch {

// What another node published when it failed.
struct PeerFailure {
  int node_rank = 0;
  int exit_status = 1;
  std::string message;
};

using rendezvous::TcpStoreServerOptions;

class NodeRendezvous {
 public:
  // Hosts or joins the store, agrees with the other nodes and picks the
  // MASTER_PORT. Throws LaunchError (unreachable endpoint, disagreement,
  // duplicate node rank, timeout). Single node: hosts a store on a free local
  // port (or the one given).
  static std::unique_ptr<NodeRendezvous> Establish(const LaunchOptions& options);
  ~NodeRendezvous();

  int node_rank() const { return node_rank_; }
  const std::string& store_addr() const { return store_addr_; }
  uint16_t store_port() const { return store_port_; }
  const std::string& master_addr() const { return master_addr_; }
  uint16_t master_port() const { return master_port_; }

  // Waits until every node is ready to start `attempt` (or throws).
  void WaitAllNodesReady(int attempt);

  // Non-blocking checks for the monitor loop (multi-node only).
  std::optional<PeerFailure> PeerFailed();
  bool RestartRequested(int attempt);

  // Tells the other nodes that this node's ranks failed: with `restart` they
  // restart together, else they stop.
  void PublishFailure(int attempt, bool restart, int exit_status, const std::string& message);

  // After this node's ranks all succeeded: waits for the others (stopping
  // early when one fails or a restart is requested). Returns the outcome.
  enum class FinishOutcome { kAllSucceeded, kRestart, kPeerFailed };
  FinishOutcome WaitForOtherNodes(int attempt, std::optional<PeerFailure>* failure);

 private:
  NodeRendezvous() = default;
  void Host(const LaunchOptions& options);
  void Join(const LaunchOptions& options);
  void AgreeWithHost(const LaunchOptions& options);
  void ClaimNodeRank(const LaunchOptions& options);
  // A joining node says goodbye (the host waits briefly for every node's
  // goodbye, so that all have read the outcome before its store closes).
  void Leave();
  void ThrowIfPeerFailed(const std::string& while_doing);
  // Waits for `keys` in slices, failing early when a peer publishes a failure.
  void WaitForKeys(const std::vector<std::string>& keys, const std::string& while_doing);

  LaunchOptions options_;
  std::unique_ptr<rendezvous::TcpStoreServer> server_;
  std::unique_ptr<rendezvous::Store> store_;
  int node_rank_ = 0;
  std::string store_addr_;
  uint16_t store_port_ = 0;
  std::string master_addr_;
  uint16_t master_port_ = 0;
  std::string my_identity_;  // host:pid, for duplicate-claim messages
};

}  // namespace infini::launch
