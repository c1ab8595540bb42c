// --on_failure=shrink across nodes: which node slots were lost and which a
// replacement node took since (docs/launcher.md, "In-place recovery"). Two
// logs in the launchers' store, appended by whoever saw the event and read
// by every node's link thread; a slot's state is derived from them, so each
// fact has one writer:
//   node_loss/count, node_loss/<i>  "<node>\n<owner host:pid>\n<ranks left>\n
//                                    <loss notice text>" (the notice the
//                                    ranks got, infini/common/loss_notice.h)
//   node_join/count, node_join/<j>  "<node>\n<owner host:pid>\n<host>\n
//                                    <loss notice text of the join notice>"
//   attempt/<k>/node_lost/<node>/<owner>  who publishes that owner's loss
//                                    (etcd: every node sees a lease go)
// A slot's ranks are K*nproc..K*nproc+nproc-1 until a replacement takes it;
// then those of its join entry. A slot is lost when a loss entry names its
// current owner (its latest join entry's, or the first one's).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "infini/common/loss_notice.h"

namespace infini::rendezvous {
class Store;
}

namespace infini::launch {

struct NodeLossEntry {
  int node_rank = 0;
  std::string owner;  // the launcher lost, "host:pid"
  int ranks_left = 0;
  loss_notice::LossNotice notice;
};

struct NodeJoinEntry {
  int node_rank = 0;
  std::string owner;  // the replacement's launcher
  std::string host;
  loss_notice::LossNotice notice;  // its ranks and "node K (host H) joined"
};

// What the logs said so far (read incrementally by Update).
class NodeSlots {
 public:
  NodeSlots(int nnodes, int processes_per_node)
      : nnodes_(nnodes), processes_per_node_(processes_per_node) {}

  // Reads the entries appended since the last call. Throws StoreError.
  void Update(rendezvous::Store& store);

  const std::vector<NodeLossEntry>& losses() const { return losses_; }
  const std::vector<NodeJoinEntry>& joins() const { return joins_; }
  // Slots whose current owner was lost.
  std::set<int> LostSlots() const;
  // The owner of `node_rank`'s slot when it is lost, nothing otherwise.
  std::optional<std::string> LostOwner(int node_rank) const;
  // The launch ranks slot `node_rank` holds now.
  std::vector<int> RanksOf(int node_rank) const;

 private:
  int nnodes_;
  int processes_per_node_;
  std::vector<NodeLossEntry> losses_;
  std::vector<NodeJoinEntry> joins_;
};

// Appends to the logs (the caller published the notice first).
void AppendNodeLoss(rendezvous::Store& store, const NodeLossEntry& entry);
void AppendNodeJoin(rendezvous::Store& store, const NodeJoinEntry& entry);
// Whether this caller is the one to publish `owner`'s loss of `node_rank`
// in `attempt` (the first to claim it; `me` is "host:pid").
bool ClaimNodeLoss(rendezvous::Store& store, int attempt, int node_rank, const std::string& owner,
                   const std::string& me);

// "4..5" (contiguous) or "1,4".
std::string RanksText(const std::vector<int>& ranks);

}  // namespace infini::launch
