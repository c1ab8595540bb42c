// One rank: a thread of a process on a node (InfiniTrain's model, with the
// semantics fixed in the review of its PR #184).
//
//   world_size  = nnodes × processes_per_node × threads_per_process
//   global_rank = global_proc_rank × threads_per_process + thread_rank
//   local_device_index = local_proc_rank × threads_per_process + thread_rank
#pragma once

#include <dlpack/dlpack.h>

#include <string>

#include "infini/parallel/env_reader.h"

namespace infini::parallel {

class Rank {
 public:
  // Throws ParallelConfigError when threads_per_process < 1 or thread_rank is
  // outside [0, threads_per_process).
  Rank(const ProcessTopology& topology, int thread_rank, int threads_per_process);

  int nnodes() const { return topology_.nnodes; }
  int processes_per_node() const { return topology_.processes_per_node; }
  int threads_per_process() const { return threads_per_process_; }
  int node_rank() const { return topology_.node_rank; }
  int local_proc_rank() const { return topology_.local_proc_rank; }
  int global_proc_rank() const { return topology_.global_proc_rank; }
  int thread_rank() const { return thread_rank_; }
  const ProcessTopology& topology() const { return topology_; }

  // Every rank of every node (after a recovery, of the survivors).
  int world_size() const;
  int global_rank() const;
  // The same rank in a world that lost ranks (Context::RecoverFromLoss):
  // world_size() and global_rank() become the survivors' numbering; the
  // node, process and thread it runs as stay. launch_global_rank() keeps
  // the launcher's number (RANK).
  Rank Renumbered(int global_rank, int world_size) const;
  int launch_global_rank() const;
  bool renumbered() const { return renumbered_world_size_ > 0; }
  // Ranks on this node, and this rank's place among them.
  int local_world_size() const { return topology_.layout(threads_per_process_).ranks_per_node(); }
  int local_rank() const { return local_proc_rank() * threads_per_process_ + thread_rank_; }
  // The device this rank drives when every rank of the node has its own.
  int local_device_index() const { return local_rank(); }

  // More than one rank in the whole run (not per node: N nodes with one
  // process each is parallel).
  bool IsParallel() const { return world_size() > 1; }
  bool IsMainRank() const { return global_rank() == 0; }
  bool IsLastRank() const { return global_rank() == world_size() - 1; }

  // "rank 5/8 (node 1/2, process 2 local 0, thread 1/2)".
  std::string ToString() const;

 private:
  ProcessTopology topology_;
  int thread_rank_;
  int threads_per_process_;
  int renumbered_world_size_ = 0;  // 0: the launcher's world
  int renumbered_global_rank_ = 0;
};

// How a rank's device is chosen among the visible ones.
struct DevicePlacement {
  // Map ranks onto the visible devices modulo their count
  // (INFINI_CCL_ALLOW_DEVICE_SHARING).
  bool allow_sharing = false;
  // The visible devices are this process's own (infini_run
  // --isolate_devices sets INFINI_CCL_DEVICES_ISOLATED=1): index them by the
  // thread rank, not by the node-wide local device index.
  bool isolated = false;
  // e.g. "CUDA_VISIBLE_DEVICES='0,1'", for messages; "" when unknown.
  std::string visible_devices_variable;
};

// This rank's device among the visible ones, before any sharing:
// local_device_index(), or thread_rank() when the visible devices are the
// process's own.
int DeviceIndexAmongVisible(const Rank& rank, bool isolated);

// The device index this rank uses on a backend that sees
// `visible_device_count` devices of type `device_type`. Host backends (kDLCPU)
// share the host: always 0. Otherwise DeviceIndexAmongVisible must be below
// the count, unless sharing is allowed, which maps ranks onto the visible
// devices modulo their count. Throws ParallelConfigError saying what is
// visible and what the layout needs.
int SelectDeviceIndex(const Rank& rank, DLDeviceType device_type, int visible_device_count,
                      const DevicePlacement& placement);

// Whether ranks of this layout share a device: more of them want one than
// there are visible devices.
bool SharesDevice(const Rank& rank, DLDeviceType device_type, int visible_device_count,
                  bool isolated);

}  // namespace infini::parallel
