// How the launchers of one run meet: node 0 hosts the store, the others join;
// they agree on the run's shape and on node ranks, start each attempt
// together, tell each other when a node fails or restarts, and heartbeat so
// that a node whose launcher dies or stalls is noticed.
//
// Threads: Establish blocks (run it off the supervising thread). After
// StartLink, one link thread owns the store connection: the supervising
// thread only reads snapshots and queues writes, so no store call ever
// delays signal handling or rank supervision.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "infini/launch/options.h"

namespace infini::rendezvous {
class TcpStoreServer;
}

namespace infini::launch {

// What another node published when it failed, or what the host published
// about a node that stopped heartbeating.
struct PeerFailure {
  int node_rank = 0;
  int exit_status = 1;
  std::string message;
};

struct StoreLink;  // node_rendezvous.cc

class NodeRendezvous {
 public:
  // Hosts or joins the store, agrees with the other nodes and picks the
  // MASTER_PORT. Throws LaunchError (unreachable endpoint, disagreement,
  // duplicate node rank, timeout). Single node: hosts a store on loopback.
  static std::unique_ptr<NodeRendezvous> Establish(const LaunchOptions& options);
  // Flushes queued writes and lets the other nodes read the outcome (bounded,
  // and cut short by a signal).
  ~NodeRendezvous();

  int node_rank() const { return node_rank_; }
  const std::string& store_addr() const { return store_addr_; }
  uint16_t store_port() const { return store_port_; }
  const std::string& master_addr() const { return master_addr_; }
  uint16_t master_port() const { return master_port_; }

  // Multi-node: hands the store connection to the link thread.
  void StartLink();

  // Waits until every node is ready to start `attempt`; throws LaunchError
  // (timeout, a peer failed or was lost, store lost) or Interrupted.
  void WaitAllNodesReady(int attempt);

  // Snapshots for the monitor loop; never touch the network.
  std::optional<PeerFailure> PeerFailed();
  bool RestartRequested(int attempt);
  // Why the store became unusable (node 0 died or stalled); empty while fine.
  std::string StoreLost();
  // The store the launchers meet through, for messages: node 0's store, or
  // etcd's members.
  std::string StoreDescription() const;

  // Queues the news that this node's ranks failed: with `restart` every node
  // restarts, else every node stops.
  void PublishFailure(int attempt, bool restart, int exit_status, const std::string& message);

  // After this node's ranks all succeeded: waits for the others (stopping
  // early when one fails or is lost, or a restart is requested).
  enum class FinishOutcome { kAllSucceeded, kRestart, kPeerFailed };
  FinishOutcome WaitForOtherNodes(int attempt, std::optional<PeerFailure>* failure);

 private:
  NodeRendezvous() = default;
  void Host(const LaunchOptions& options);
  void Join(const LaunchOptions& options);
  void AgreeWithHost(const LaunchOptions& options);
  // --rdzv_backend=etcd: the launchers meet through etcd; node 0 still hosts
  // the ranks' store.
  void MeetOnEtcd(const LaunchOptions& options);
  void AgreeOnEtcd(const LaunchOptions& options);
  void HostRanksStore(const LaunchOptions& options);
  void RemoveRunFromEtcd();
  void StopEtcdThreads();
  std::string EtcdEndpointsText() const;
  void ClaimNodeRank(const LaunchOptions& options);
  void PublishDirect(int attempt, bool restart, int exit_status, const std::string& message);
  std::string LostMessage(const std::string& while_doing);

  LaunchOptions options_;
  std::unique_ptr<rendezvous::TcpStoreServer> server_;
  std::shared_ptr<StoreLink> link_;
  int node_rank_ = 0;
  std::string store_addr_;
  uint16_t store_port_ = 0;
  std::string master_addr_;
  uint16_t master_port_ = 0;
  std::string my_identity_;  // host:pid, for messages
};

// Runs `establish` on a helper thread while this thread handles signals:
// throws Interrupted at once on SIGINT/SIGTERM/SIGHUP (the helper is left to
// die with the process).
std::unique_ptr<NodeRendezvous> EstablishWhileWatchingSignals(const LaunchOptions& options);

}  // namespace infini::launch
