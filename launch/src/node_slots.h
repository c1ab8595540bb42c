// --on_failure=shrink across nodes: the notices of the ranks that lost node
// slots had and that replacement nodes took since (docs/launcher.md,
// "In-place recovery"); which slots are lost or replaced is the run
// record's (run_record.h). Two logs in the launchers' store, appended by the
// launcher that recorded the loss or by the replacement, and read by every
// node's link thread:
//   node_loss/count, node_loss/<i>  "<node>\n<owner host:pid>\n<ranks left>\n
//                                    <loss notice text>" (the notice the
//                                    ranks got, infini/common/loss_notice.h)
//   node_join/count, node_join/<j>  "<node>\n<owner host:pid>\n<host>\n
//                                    <loss notice text of the join notice>"
// A slot's ranks are K*nproc..K*nproc+nproc-1 until a replacement takes it;
// then those of its join entry.
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
// "4..5" (contiguous) or "1,4".
std::string RanksText(const std::vector<int>& ranks);

}  // namespace infini::launch
