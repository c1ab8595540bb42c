// The link thread: once a node has joined, the one thread that talks to the
// meeting point, whichever backend it is. It runs the writes the supervising
// thread queues, keeps this node alive and watches the others (the handler's
// Watch), and reads the run's keys into a snapshot, so that no store call
// ever delays signal handling or rank supervision.
//
// Held by shared_ptr, with the handler: a link thread stuck in a call to a
// stalled store can be left behind safely.
#pragma once

#include <sys/eventfd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "infini/launch/loss_publisher.h"
#include "infini/launch/node_rendezvous.h"
#include "infini/launch/rendezvous_handler.h"
#include "infini/launch/run_decisions.h"
#include "node_slots.h"

namespace infini::rendezvous {
class Store;
}

namespace infini::launch {

struct RendezvousLink : std::enable_shared_from_this<RendezvousLink> {
  RendezvousLink(std::shared_ptr<RendezvousHandler> backend, const RendezvousWorld& world,
                 const LaunchOptions& options)
      : handler(std::move(backend)),
        elastic(options.elastic()),
        mode(decisions::ModeOf(options)),
        max_nnodes(options.nnodes),
        round(world.round),
        nnodes(world.nnodes),
        node_rank(world.node_rank),
        slots(options.nnodes, options.processes_per_node) {}
  ~RendezvousLink();

  // Starts the handler's watch and the (detached) thread.
  void Start();
  // Queues a write for the link thread.
  void Post(std::function<void(rendezvous::Store&)> write);
  // Waits up to `bound` until the thread has returned (or never started).
  void WaitUntilFinished(std::chrono::milliseconds bound);
  // No write queued or running.
  bool Flushed() const { return writes.empty() && writes_in_flight == 0; }  // mutex held

  // An elastic run's next round, on the link thread (called from a posted
  // write): the round's world and a fresh snapshot.
  void EnterRound(const RendezvousWorld& world);

  // Set before the thread starts, then read-only.
  const std::shared_ptr<RendezvousHandler> handler;
  const bool elastic;  // --nnodes=MIN:MAX
  // The run's mode: what a lost node becomes is the decision table's
  // (run_decisions.h): the run's failure, a reopened round, or under shrink a
  // loss of its ranks (node_slots.h).
  const decisions::Mode mode;
  const int max_nnodes;  // MAX
  bool is_host = false;
  // Shrink: the ranks' store and --min_ranks (key_namespace is per attempt).
  ShrinkSettings ranks_store;

  std::mutex mutex;
  std::condition_variable wake;
  // Guarded by mutex: the round this node is in (changes only in elastic
  // runs, through EnterRound).
  int round;
  int nnodes;
  int node_rank;
  // Guarded by mutex: requests from the supervising thread...
  std::deque<std::function<void(rendezvous::Store&)>> writes;
  int writes_in_flight = 0;
  int watched_attempt = 0;
  bool stop = false;
  // ...and what the link thread saw.
  std::optional<PeerFailure> failure;
  // Elastic runs: the round's membership changed (its reopen key: a lost
  // node, node_rank -1 for another cause), and nodes waiting to join the
  // next round.
  std::optional<PeerFailure> reopen;
  int nodes_waiting = 0;
  std::set<int> done_nodes;  // of the watched attempt
  std::map<int, bool> restart_by_attempt;
  bool all_ready = false;
  bool all_done = false;
  bool all_left = false;
  std::string missing_ready;  // node ranks, for the timeout message
  std::string lost;           // the store failed: why
  std::set<int> lost_nodes;   // nodes the watch found gone
  uint64_t changes_seen = 0;  // changes the meeting point reported
  // Shrink: slots whose current owner was lost (not waited for), one line
  // per node loss for the summary, and lines the supervising thread has to
  // say (losses and joins seen in the logs).
  std::map<int, std::string> lost_slots;  // node rank -> the owner lost there
  std::set<int> replaced_slots;           // slots a replacement took (once or more)
  std::vector<std::string> node_loss_lines;
  std::vector<std::string> news;
  bool started = false;   // Start ran: a thread runs Run
  bool finished = false;  // Run returned
  // Readable (an eventfd) after each snapshot and when the thread ends: the
  // supervising thread's waits wake on it instead of their next poll step.
  const int read_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

 private:
  void RunUntilStopped(std::chrono::milliseconds quiet_period);
  void RunWrites();
  void PublishLost(const MembershipChange& change);
  // Shrink: publishes a lost node's ranks as lost (once, whoever claims
  // it). Returns the run's failure instead when it cannot go on (fewer than
  // --min_ranks left, or the ranks' store refused the notice).
  std::optional<std::string> PublishNodeLoss(const LostNode& node, int attempt);
  // Shrink: reads the slot logs; says what is new; stops a node that was
  // declared lost (it stalled) by throwing StoreError.
  void ReadSlots();
  void ReadPeers(int attempt);
  void TellReaders();

  // The link thread's own.
  NodeSlots slots;
  size_t losses_said = 0;
  size_t joins_said = 0;
};

}  // namespace infini::launch
