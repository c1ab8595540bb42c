// Where ranks sit among nodes, processes and threads, and the one copy of
// the arithmetic on it: infini_run numbers the processes node by node
// (launch/), and a process may run several thread ranks (parallel/'s Rank).
//
//   process rank = node_rank × processes_per_node + local process rank
//   global rank  = process rank × threads_per_process + thread rank
//   world size   = nnodes × processes_per_node × threads_per_process
#pragma once

#include <cstdint>
#include <vector>

namespace infini {

struct RankLayout {
  int nnodes = 1;
  int processes_per_node = 1;
  int node_rank = 0;  // the node this layout is seen from
  int threads_per_process = 1;

  // In 64 bits, for the checks that refuse a world above INT_MAX.
  int64_t WideWorldSize() const {
    return int64_t{nnodes} * processes_per_node * threads_per_process;
  }
  int process_world_size() const { return nnodes * processes_per_node; }
  int world_size() const { return process_world_size() * threads_per_process; }
  int ranks_per_node() const { return processes_per_node * threads_per_process; }

  // This node's process `local_process`, numbered in the whole run.
  int ProcessRank(int local_process) const {
    return node_rank * processes_per_node + local_process;
  }
  // Thread `thread` of process `process_rank` of the run.
  int GlobalRankOfProcess(int process_rank, int thread = 0) const {
    return process_rank * threads_per_process + thread;
  }
  // Thread `thread` of this node's process `local_process`.
  int GlobalRank(int local_process, int thread = 0) const {
    return GlobalRankOfProcess(ProcessRank(local_process), thread);
  }
  // The process ranks of this node, ascending.
  std::vector<int> ProcessRanksOfNode() const {
    std::vector<int> ranks;
    for (int local = 0; local < processes_per_node; ++local) ranks.push_back(ProcessRank(local));
    return ranks;
  }
  // Where process `process_rank` of the run sits.
  int NodeOfProcess(int process_rank) const { return process_rank / processes_per_node; }
  int LocalOfProcess(int process_rank) const { return process_rank % processes_per_node; }

  RankLayout OnNode(int node) const {
    RankLayout seen = *this;
    seen.node_rank = node;
    return seen;
  }

  // A node that joins a running run as a node after every other (a
  // replacement node, loss_notice.h "Joins"): `process_world_size` counts
  // every process rank given so far, its own block included.
  static RankLayout JoinedAfterEveryNode(int process_world_size, int processes_per_node) {
    RankLayout joined;
    joined.processes_per_node = processes_per_node;
    joined.nnodes = process_world_size / processes_per_node;
    joined.node_rank = joined.nnodes - 1;
    return joined;
  }
};

}  // namespace infini
