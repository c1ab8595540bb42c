// Where the launchers of one run meet, behind one interface (torchrun's
// RendezvousHandler: its agent calls next_rendezvous() and never asks which
// backend answers). Two backends: node 0's TCP store (tcp_rendezvous.cc,
// --rdzv_backend=c10d/static) and etcd (etcd_rendezvous.cc). A backend gives
// the run record's home (run_record_store.h), keeps its node alive and says
// which nodes it found lost; nothing else. What both share is written once
// on top, through the run record: JoinRound (agreeing on the configuration,
// node ranks, rounds), the link thread (rendezvous_link.cc) and the run's
// protocol of attempts and outcomes (node_rendezvous.cc).
//
// Threads: the join steps run on the thread that establishes the run; from
// StartWatch on, every call that touches the network (store(), Watch,
// RemoveRun) is the link thread's; Describe and Shutdown belong to the
// supervising thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "infini/launch/options.h"
#include "infini/launch/run_record_store.h"

namespace infini::rendezvous {
class Store;
class StoreError;
}  // namespace infini::rendezvous

namespace infini::launch {

// What one node learns by joining a round (torchrun's RendezvousInfo).
struct RendezvousWorld {
  // The membership's generation: 0, and in an elastic run (--nnodes=MIN:MAX)
  // one more each time the nodes meet again.
  int round = 0;
  int node_rank = -1;
  int nnodes = 1;
  // The ranks' store (INFINI_STORE_ADDR/PORT) and MASTER_ADDR/MASTER_PORT.
  std::string store_addr;
  uint16_t store_port = 0;
  std::string master_addr;
  uint16_t master_port = 0;
  // Elastic runs: the attempt this round starts with and the restarts that
  // --max_restarts counted before it (a node arriving late learns them here).
  int first_attempt = 0;
  int failure_restarts = 0;
  // --on_failure=shrink: this node took the slot of a lost node while the
  // run went on (node_slots.h).
  bool replaces_lost_node = false;
};

// The run's configuration as the meeting point holds it, and how messages
// name whose it is ("disagrees with <whose> on --x: <holder> has ...").
struct AgreedConfig {
  std::string encoded;
  std::string whose;
  std::string holder;
};

// A node found gone, with the one line that says how.
struct LostNode {
  int node_rank = 0;
  std::string message;
  std::string owner;  // its launcher, "host:pid" ("?" when unknown)
  // Found by its launcher's store connection closing (TCP), not by a
  // keep-alive running out.
  bool connection_closed = false;
};

// What the watch saw since its last look.
struct MembershipChange {
  std::vector<LostNode> lost;
};

class RendezvousHandler {
 public:
  RendezvousHandler();
  virtual ~RendezvousHandler() = default;

  // This launcher in the record, owner keys and messages: "host:pid" (a
  // second handler in one process, as tests make, adds "/2", ...).
  const std::string& identity() const { return identity_; }

  // Join: reaches the meeting point, hosting it where this node does (TCP:
  // node 0 binds the endpoint). Throws LaunchError naming the flag.
  virtual void Connect() = 0;
  // The connection the protocol's keys go through; valid after Connect, for
  // the thread that owns it.
  virtual rendezvous::Store& store() = 0;
  // Agree on config: publishes `mine` where this node sets the run's
  // configuration (TCP: node 0; etcd: the first to arrive) and returns the
  // one the run holds. JoinRound compares the fields.
  virtual AgreedConfig AgreeOnConfig(const std::string& mine) = 0;
  // The run record's home (run_record_store.h), valid after Connect, for
  // the thread that owns the connection: every membership, attempt and
  // outcome goes through it.
  virtual RunRecordStore& records() = 0;
  // Once `world->node_rank` is claimed: starts this node's heartbeat or
  // lease, hosts what node 0 hosts, and fills in the ranks' store address
  // and MASTER_ADDR/MASTER_PORT.
  virtual void Announce(RendezvousWorld* world) = 0;
  // Whether no launcher that `record` holds is there any more, so a new run
  // with the same id may start afresh: etcd, where the record outlives its
  // writers (each launcher keeps a presence key on its lease from Connect
  // on). TCP's record ends with node 0's store: never.
  virtual bool Abandoned(const RunRecord&) { return false; }
  // Whether this node hosts a store, and so at the end waits until every
  // other node has read the outcome and left. An elastic round makes such a
  // node its node 0.
  virtual bool hosts_store() const = 0;
  // Elastic runs, before Announce: from here on Announce, the heartbeat or
  // lease and Watch are those of round `round` with `nnodes` members (their
  // keys under RoundKey); nodes reported lost in earlier rounds are
  // forgotten. On the thread that owns the connection.
  virtual void EnterRound(int round, int nnodes) = 0;
  // Heartbeat/lease and watch, from here on the link thread's: `on_change`
  // is called (on any thread) whenever the meeting point reports a change.
  // Returns how long the link may go without reading when no change came
  // (etcd pushes changes; the TCP store is polled).
  virtual std::chrono::milliseconds StartWatch(std::function<void()> on_change) = 0;
  // One step of the link thread: keeps this node alive (heartbeat, or checks
  // that its lease still is; throws StoreError when this node itself is
  // lost) and returns the nodes found lost since the last step, each once.
  // `owners`: the launcher ("host:pid") holding each node rank of the round
  // now, from the record (a shrink replacement's slot changes owner).
  virtual MembershipChange Watch(const std::vector<std::string>& owners) = 0;

  // Describe: the meeting point, for messages ("etcd at a:1,b:2
  // (--rdzv_endpoint)").
  virtual std::string Describe() const = 0;
  // A store failure while joining, as the one line the user reads.
  virtual LaunchError JoinError(const rendezvous::StoreError& error) const = 0;

  // Clean up. RemoveRun: node 0, last, on the link thread: removes the run's
  // keys from a meeting point that outlives the run (etcd); nothing where it
  // ends with node 0. Shutdown: ends the backend's threads and servers;
  // `wait_for_link(bound)` returns once the link thread has left the store
  // (or `bound` passed), for backends whose connection must be idle at exit.
  virtual void RemoveRun() = 0;
  // A clean exit, on the link thread, once this node's left key is written:
  // whatever would tell the others it died is withdrawn, so its connection
  // closing after a slow flush never reads as a loss. TCP cancels its
  // on-close keys; elsewhere nothing (etcd's lease says it left).
  virtual void LeaveCleanly() {}
  virtual void Shutdown(const std::function<void(std::chrono::milliseconds)>& wait_for_link) = 0;

 private:
  const std::string identity_;
};

// The backend --rdzv_backend chose (multi-node runs only).
std::shared_ptr<RendezvousHandler> MakeRendezvousHandler(const LaunchOptions& options);

// What the record's transitions need of the options.
RunRules RulesOf(const LaunchOptions& options);
// The wall clock the record's deadlines are kept in.
WallTime WallNow();

// Joins this node into the run through `handler`: connect, agree on the
// configuration (a node that disagrees stops the run, naming the flag), then
// JoinThroughRecord. Throws LaunchError.
RendezvousWorld JoinRound(RendezvousHandler& handler, const LaunchOptions& options);

// Arrives in the record (record::Join) unless it holds this node already,
// waits until its round closed with this node in it (a fixed world: at
// once; elastic, torchrun's dynamic rendezvous: --nnodes MAX arrived, or MIN
// and --rdzv_conf=last_call_timeout passed; join_timeout bounds the wait for
// MIN; a node that arrives at a full round waits for one with room), then
// enters the round and announces. `stopped` is polled while waiting (true:
// give up, throwing LaunchError). Throws LaunchError, StoreError.
RendezvousWorld JoinThroughRecord(RendezvousHandler& handler, const LaunchOptions& options,
                                  const std::function<bool()>& stopped);

}  // namespace infini::launch
