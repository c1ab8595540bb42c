// How the launchers of one run meet: through a RendezvousHandler
// (rendezvous_handler.h: node 0's TCP store or etcd, as --rdzv_backend
// says) they join, agree on the run's shape and on node ranks; on top of
// it, written once for every backend, this class starts each attempt
// together, tells the other nodes when a node fails or restarts, and hears
// when one is lost.
//
// Threads: Establish blocks (run it off the supervising thread). After
// StartLink, one link thread (rendezvous_link.h) owns the store connection:
// the supervising thread only reads snapshots and queues writes, so no store
// call ever delays signal handling or rank supervision.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "infini/common/loss_notice.h"
#include "infini/launch/options.h"
#include "infini/launch/peer_failure.h"
#include "infini/launch/rendezvous_handler.h"
#include "infini/launch/run_decisions.h"
#include "infini/launch/run_record.h"
#include "infini/rendezvous/tcp_store.h"

namespace infini::rendezvous {
class TcpStoreServer;
}

namespace infini::launch {

// What the other nodes did, as the decision table's event
// (run_decisions.h), with what telling it needs.
struct RunEvent {
  decisions::Event event = decisions::Event::kRoundClosed;
  std::optional<PeerFailure> peer;  // who failed, was lost or arrived
  std::string store_loss;           // kStoreLost: why
  int exit_status = 1;              // kPeerFailed: the failing node's
};

struct RendezvousLink;  // rendezvous_link.h

class NodeRendezvous {
 public:
  // Hosts or joins the store, agrees with the other nodes and picks the
  // MASTER_PORT. Throws LaunchError (unreachable endpoint, disagreement,
  // duplicate node rank, timeout). A single node is node 0 of a run of one,
  // on a TCP store it hosts on loopback.
  static std::unique_ptr<NodeRendezvous> Establish(const LaunchOptions& options);
  // Flushes queued writes and lets the other nodes read the outcome (bounded,
  // and cut short by a signal).
  ~NodeRendezvous();

  int node_rank() const { return world_.node_rank; }
  int nnodes() const { return world_.nnodes; }
  int round() const { return world_.round; }
  // Elastic runs: the attempt this node's round starts with, and the
  // restarts --max_restarts counted before it.
  int first_attempt() const { return world_.first_attempt; }
  int failure_restarts() const { return world_.failure_restarts; }
  // The run's store, where the launchers meet (node 0's, or a round's on etcd).
  const std::string& store_addr() const { return world_.store_addr; }
  uint16_t store_port() const { return world_.store_port; }
  // The store that this node's ranks are told (INFINI_STORE_ADDR/PORT): the
  // node's relay on loopback (several nodes, --rdzv_conf=relay=1), else the
  // run's store.
  std::string ranks_store_addr() const;
  uint16_t ranks_store_port() const;
  // What the relay sent upstream so far (zeros without one).
  rendezvous::RelayCounts relay_counts() const;
  const std::string& master_addr() const { return world_.master_addr; }
  uint16_t master_port() const { return world_.master_port; }

  // Hands the store connection to the link thread.
  void StartLink();

  // --on_failure=shrink: this node took the slot of a lost node while the
  // run goes on (a replacement): it joins the running attempt instead of
  // waiting for every node to be ready.
  bool replaces_lost_node() const { return world_.replaces_lost_node; }
  // A replacement: writes the entry that tells the other launchers which
  // ranks this node took (`join`: the notice the ranks got), waiting until
  // it is written (bounded). Throws LaunchError (store lost) or Interrupted.
  void PublishJoin(const loss_notice::LossNotice& join);
  // Shrink: says the node losses and joins seen since the last call (one
  // line each); on the supervising thread.
  void SayNews();
  // Shrink: one line per node lost in the run so far, for the loss summary.
  std::vector<std::string> NodeLossLines();

  // Waits until every node is ready to start `attempt`: true. False (elastic
  // runs) when the membership changed first: meet again (NextRound). A
  // member not ready within --rdzv_conf=heartbeat_timeout of this node is
  // lost (it died while joining). Throws LaunchError (timeout, a peer
  // failed or was lost, store lost) or Interrupted.
  bool WaitAllNodesReady(int attempt);

  // Elastic runs: why this round's membership changed (a lost node, or
  // nodes waiting to join), nothing while it holds. A snapshot.
  std::optional<PeerFailure> MembershipChanged();
  // Elastic runs: leaves this round for the next (torchrun's next_rendezvous):
  // waits with whoever arrives there, takes the new node rank and world;
  // returns the attempt the record starts it with. Throws LaunchError (fewer
  // than MIN nodes within the join timeout, store lost) or Interrupted.
  int NextRound();

  // Snapshots for the monitor loop; never touch the network. EventSeen: the
  // first of another node's failure, the store's loss, a restart requested,
  // a membership change (elastic); nothing while all is well.
  std::optional<PeerFailure> PeerFailed();
  std::optional<RunEvent> EventSeen(int attempt);
  // Elastic: the membership change MembershipChanged sees, as an event (a
  // node lost, or one arriving).
  RunEvent MembershipEvent(bool while_joining);
  // Elastic, after a rank failed: waits up to `grace` for a node's loss to
  // show (it broke the rank's collective): that membership change, or
  // nothing (another node failed, the store was lost, or none showed).
  std::optional<RunEvent> LossBehindRankFailure(std::chrono::milliseconds grace);
  // Why the store became unusable (node 0 died or stalled); empty while fine.
  std::string StoreLost();
  // The store the launchers meet through, for messages: node 0's store, or
  // etcd's members.
  std::string StoreDescription() const { return handler_->Describe(); }
  // Elastic runs on node 0's TCP store: the line that says node 0's loss
  // ends the run; empty otherwise.
  std::string StoreLossNote() const;

  // Queues the news that this node's ranks failed: with `restart` every node
  // restarts, else every node stops.
  void PublishFailure(int attempt, bool restart, int exit_status, const std::string& message);

  // After this node's ranks all succeeded: waits for the others (stopping
  // early when one fails or is lost, or a restart is requested), and returns
  // the outcome: every node succeeded, a peer failed, a restart requested;
  // elastic runs: a membership change while the others run, or a node lost
  // once every other one succeeded (kNodeLostOthersDone, its loss in peer).
  RunEvent WaitForOtherNodes(int attempt);

 private:
  NodeRendezvous() = default;
  // The end of the link: this node says it left (node 0 waits until every
  // node read the outcome and left), then the link thread and the backend stop.
  void Leave();
  // Node 0: removes the run's keys where the meeting point outlives it.
  void RemoveRun();
  std::string LostMessage(const std::string& while_doing);
  // Waits up to `bound` until `done` holds (read under the link's mutex):
  // true; false when the link lost the store or `bound` passed. Throws
  // Interrupted on a signal.
  bool WaitForLink(std::chrono::milliseconds bound, const std::function<bool()>& done);
  // Read from the link's snapshot of the record (its mutex held where the
  // caller holds it): the run's failure, the node ranks not ready for the
  // record's attempt, whether the record restarted past `attempt`, whether
  // every other member left (the host's linger).
  static std::optional<PeerFailure> FailureIn(const RunRecord& record);
  std::vector<int> MissingReady(const RunRecord& record) const;
  bool RestartRequested(int attempt);
  bool EveryOtherNodeLeft() const;
  // Several nodes: (re)starts the relay for the ranks, forwarding to the
  // round's store. A restart (etcd: the round's store moved) leaves the
  // handler's connection alone: only TCP's goes through the relay, and TCP's
  // store never moves.
  void StartRelay();
  // Appends a line to --rdzv_conf=relay_log (one write: lines of several
  // threads and launchers never mix).
  void LogRelay(const std::string& line) const;

  LaunchOptions options_;
  RendezvousWorld world_;
  std::unique_ptr<rendezvous::TcpStoreServer> relay_;  // several nodes
  int relay_log_fd_ = -1;                              // --rdzv_conf=relay_log
  // The backend, and the link thread's state.
  std::shared_ptr<RendezvousHandler> handler_;
  std::shared_ptr<RendezvousLink> link_;
};

// Runs `establish` on a helper thread while this thread handles signals:
// throws Interrupted at once on SIGINT/SIGTERM/SIGHUP (the helper is left to
// die with the process).
std::unique_ptr<NodeRendezvous> EstablishWhileWatchingSignals(const LaunchOptions& options);

}  // namespace infini::launch
