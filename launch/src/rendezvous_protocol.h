// What the launchers of one run keep besides the run record
// (run_record.h, one key "infini_run/record" on TCP, on etcd under the run's
// prefix). All under "infini_run/" (one store serves one run):
//   config                  the run's configuration: what every node must match
//   master_addr, master_port  the ranks' MASTER_ADDR/MASTER_PORT, chosen on node 0
//                           (etcd, round r > 0: under "infini_run/round/<r>/", RoundKey)
//   node_loss/..., node_join/...  --on_failure=shrink's notices of lost and
//                           joined ranks (node_slots.h)
// Backends add their own liveness keys:
//   TCP (node 0 hosts the store): heartbeat/<r>, a counter node r's link
//     thread increments and node 0 watches; launcher_gone/<r> ("host:pid"
//     of node r) and launcher_gone ("r host:pid"), on-close keys node r
//     registers on its store connection: set when it closes (it died).
//   etcd (under the run's prefix, EtcdRunPrefix: run id and a hash of the
//     run's secret; each key on its writer's lease): alive/<r> (no
//     "infini_run/"), "host:pid" of node r, whose deletion (lease expired)
//     tells the others that node r died or stalled; present/<host:pid>, set
//     by each launcher as it connects, so that a record none of whose
//     launchers is present any more (a dead run's: the record has no lease)
//     is started afresh; store_addr, store_port: the ranks' store, still
//     hosted by node 0.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "infini/launch/rendezvous_handler.h"

namespace infini::rendezvous {
class Store;
}

namespace infini::launch {

std::string Key(const std::string& name);
// Key(name) in round 0, else "infini_run/round/<round>/<name>".
std::string RoundKey(int round, const std::string& name);
// "<kind>/<node>" under RoundKey(round, ...).
std::string NodeKeys(int round, const std::string& kind, int node);

// "host:pid": this launcher, in owner keys and messages.
std::string NodeIdentity();
// "1.5 s".
std::string Seconds(std::chrono::milliseconds duration);

std::shared_ptr<RendezvousHandler> MakeTcpRendezvous(const LaunchOptions& options);
std::shared_ptr<RendezvousHandler> MakeEtcdRendezvous(const LaunchOptions& options);

}  // namespace infini::launch
