// The launchers' keys, written once for every backend. All under
// "infini_run/" (one store serves one run):
//   config                  the run's configuration: what every node must match
//   master_addr, master_port  the ranks' MASTER_ADDR/MASTER_PORT, chosen on node 0
//   joined                  counter handing out node ranks in join order
//   node/<r>/owner          "host:pid" of the node that claimed rank r
//   node/<r>/host           its host name
//   attempt/<k>/ready/<r>   node r is ready to start attempt k
//   attempt/<k>/restart     a node failed in attempt k: everyone restarts
//   attempt/<k>/done/<r>    node r's ranks all succeeded in attempt k ("host:pid"
//                           of its launcher: a replacement's is not its
//                           lost predecessor's, node_slots.h)
//   failure                 "status\nnode\nmessage": the run stops
//   left/<host:pid>         that node is about to exit (node 0 waits for it)
//   node_loss/..., node_join/..., attempt/<k>/node_lost/...  --on_failure=shrink's
//                           lost and replaced node slots (node_slots.h)
// Elastic runs (--nnodes=MIN:MAX) meet in rounds. Round 0 is the keys above;
// round r > 0 puts the per-round keys (node/<r>/..., the backends' liveness
// keys and where the ranks' store is) under "infini_run/round/<r>/"
// (RoundKey). Every round, 0 included:
//   arrived                 counter: a node's arrival index in the round
//   arrival/<i>             "host:pid\n1" (1: it hosts a store, so it is node 0)
//   closed                  how many arrived when the round closed: those are
//                           its members, the later ones wait for the next round
//   reopen                  "1\nnode\nwhy": the membership changed; every
//                           member stops its ranks and meets in the next round
// and for the whole run:
//   current_round           the newest round that closed (where a node
//                           arriving late starts looking)
//   next_attempt            the attempt the next round starts with
//   failure_restarts        restarts that --max_restarts counts so far
// Backends add their own liveness keys:
//   TCP (node 0 hosts the store): heartbeat/<r>, a counter node r's link
//     thread increments and node 0 watches; launcher_gone/<r> ("host:pid"
//     of node r) and launcher_gone ("r host:pid"), on-close keys node r
//     registers on its store connection: set when it closes (it died).
//   etcd (under the run's prefix, EtcdRunPrefix: run id and a hash of the
//     run's secret; each key on its writer's lease): alive/<r> (no
//     "infini_run/"), "host:pid" of node r, whose deletion (lease expired)
//     tells the others that node r died or stalled; store_addr, store_port:
//     the ranks' store, still hosted by node 0.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "infini/launch/peer_failure.h"
#include "infini/launch/rendezvous_handler.h"

namespace infini::rendezvous {
class Store;
}

namespace infini::launch {

std::string Key(const std::string& name);
// Key(name) in round 0, else "infini_run/round/<round>/<name>".
std::string RoundKey(int round, const std::string& name);
std::string AttemptKey(int attempt, const std::string& name);
// "infini_run/<kind>/<node>"; with a round, under RoundKey.
std::string NodeKeys(const std::string& kind, int node);
std::string NodeKeys(int round, const std::string& kind, int node);

// Raises the run's integer Key(name) to at least `value`.
void RaiseRunCounter(rendezvous::Store& store, const std::string& name, int value);

std::string EncodeFailure(int exit_status, int node, const std::string& message);
PeerFailure DecodeFailure(const std::string& encoded);
// Stops the run: the first failure written is the one every node reports.
// Throws StoreError.
void PublishRunFailure(rendezvous::Store& store, int node, int exit_status,
                       const std::string& message);

// "host:pid": this launcher, in owner keys and messages.
std::string NodeIdentity();
// "1.5 s".
std::string Seconds(std::chrono::milliseconds duration);

std::shared_ptr<RendezvousHandler> MakeTcpRendezvous(const LaunchOptions& options);
std::shared_ptr<RendezvousHandler> MakeEtcdRendezvous(const LaunchOptions& options);

}  // namespace infini::launch
