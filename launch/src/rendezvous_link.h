// The link thread: once a node has joined, the one thread that talks to the
// meeting point, whichever backend it is. It applies the record transitions
// the supervising thread queues, keeps this node alive and watches the
// others (the handler's Watch: a lost node becomes record::NodeLost), and
// reads the run record into a snapshot, so that no store call ever delays
// signal handling or rank supervision.
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
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "infini/launch/loss_publisher.h"
#include "infini/launch/node_rendezvous.h"
#include "infini/launch/rendezvous_handler.h"
#include "infini/launch/run_record.h"
#include "node_slots.h"

namespace infini::launch {

struct RendezvousLink : std::enable_shared_from_this<RendezvousLink> {
  using Transition = std::function<RecordStep(const RunRecord&)>;

  RendezvousLink(std::shared_ptr<RendezvousHandler> backend, const RendezvousWorld& world,
                 const LaunchOptions& options)
      : handler(std::move(backend)),
        rules(RulesOf(options)),
        round(world.round),
        nnodes(world.nnodes),
        node_rank(world.node_rank),
        slots(options.nnodes, options.processes_per_node) {}
  ~RendezvousLink();

  // Starts the handler's watch and the (detached) thread.
  void Start();
  // Queues work for the link thread, which owns the connection.
  void Post(std::function<void(RendezvousLink&)> work);
  // Queues a record transition (applied by compare-and-set, again on a newer
  // record while another launcher wrote first).
  void Apply(Transition transition);
  // On the link thread: applies `transition` now and keeps the result as
  // the snapshot. Throws StoreError.
  RecordStep ApplyNow(const Transition& transition);
  // Waits up to `bound` until the thread has returned (or never started).
  void WaitUntilFinished(std::chrono::milliseconds bound);
  // No write queued or running.
  bool Flushed() const { return writes.empty() && writes_in_flight == 0; }  // mutex held

  // An elastic run's next round, on the link thread (called from posted
  // work): the round this node is in from now on.
  void EnterRound(const RendezvousWorld& world);

  // Set before the thread starts, then read-only.
  const std::shared_ptr<RendezvousHandler> handler;
  const RunRules rules;
  // Shrink: the ranks' store and --min_ranks (key_namespace is per attempt).
  ShrinkSettings ranks_store;

  std::mutex mutex;
  std::condition_variable wake;
  // Guarded by mutex: the round this node is in (changes only in elastic
  // runs, through EnterRound).
  int round;
  int nnodes;
  int node_rank;
  // Guarded by mutex: work from the supervising thread...
  std::deque<std::function<void(RendezvousLink&)>> writes;
  int writes_in_flight = 0;
  bool stop = false;
  // ...and what the link thread saw: the record as last read (its version
  // only grows), why the store failed, the nodes its watch found gone, and
  // under shrink one line per node loss for the summary and the lines the
  // supervising thread has to say (losses and joins seen in the logs).
  RunRecord record;
  std::string lost;
  std::set<std::string> lost_owners;
  std::vector<std::string> node_loss_lines;
  std::vector<std::string> news;
  uint64_t changes_seen = 0;  // changes the meeting point reported
  bool started = false;       // Start ran: a thread runs Run
  bool finished = false;      // Run returned
  // Readable (an eventfd) after each snapshot and when the thread ends: the
  // supervising thread's waits wake on it instead of their next poll step.
  const int read_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

 private:
  void RunUntilStopped(std::chrono::milliseconds quiet_period);
  void RunWrites();
  void Remember(const RunRecord& newer);
  // The owners of this node's round by node rank, for the handler's watch.
  std::vector<std::string> Owners();
  void RecordLosses(const MembershipChange& change);
  // Shrink: publishes a lost node's ranks as lost (this launcher recorded
  // the loss). Returns the run's failure instead when it cannot go on (fewer
  // than --min_ranks left, or the ranks' store refused the notice).
  std::optional<std::string> PublishNodeLoss(const LostNode& node, int attempt);
  // Shrink: reads the slot logs; says what is new; stops a node that was
  // declared lost (it stalled) by throwing StoreError.
  void ReadSlots();
  void TellReaders();

  // The link thread's own.
  NodeSlots slots;
  std::vector<std::string> owners_;
  size_t losses_said = 0;
  size_t joins_said = 0;
};

}  // namespace infini::launch
