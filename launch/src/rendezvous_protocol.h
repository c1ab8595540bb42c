// The launchers' keys, written once for every backend. All under
// "infini_run/" (one store serves one run):
//   config                  the run's configuration: what every node must match
//   master_addr, master_port  the ranks' MASTER_ADDR/MASTER_PORT, chosen on node 0
//   joined                  counter handing out node ranks in join order
//   node/<r>/owner          "host:pid" of the node that claimed rank r
//   node/<r>/host           its host name
//   attempt/<k>/ready/<r>   node r is ready to start attempt k
//   attempt/<k>/restart     a node failed in attempt k: everyone restarts
//   attempt/<k>/done/<r>    node r's ranks all succeeded in attempt k
//   failure                 "status\nnode\nmessage": the run stops
//   left/<host:pid>         that node is about to exit (node 0 waits for it)
// Backends add their own liveness keys:
//   TCP (node 0 hosts the store): heartbeat/<r>, a counter node r's link
//     thread increments and node 0 watches.
//   etcd (under the run's prefix, EtcdRunPrefix: run id and a hash of the
//     run's secret; each key on its writer's lease): alive/<r> (no
//     "infini_run/"), "host:pid" of node r, whose deletion (lease expired)
//     tells the others that node r died or stalled; store_addr, store_port:
//     the ranks' store, still hosted by node 0.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "infini/launch/node_rendezvous.h"
#include "infini/launch/rendezvous_handler.h"

namespace infini::rendezvous {
class Store;
}

namespace infini::launch {

std::string Key(const std::string& name);
std::string AttemptKey(int attempt, const std::string& name);
// "infini_run/<kind>/<node>".
std::string NodeKeys(const std::string& kind, int node);

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
