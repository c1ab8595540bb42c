#include "infini/parallel/rank.h"

#include <cstdint>
#include <limits>

#include "infini/parallel/errors.h"

namespace infini::parallel {

Rank::Rank(const ProcessTopology& topology, int thread_rank, int threads_per_process)
    : topology_(topology), thread_rank_(thread_rank), threads_per_process_(threads_per_process) {
  if (threads_per_process < 1) {
    throw ParallelConfigError("threads_per_process=" + std::to_string(threads_per_process) +
                              ": expected a positive number of threads (ranks) per process");
  }
  if (thread_rank < 0 || thread_rank >= threads_per_process) {
    throw ParallelConfigError("thread_rank=" + std::to_string(thread_rank) + ": expected 0.." +
                              std::to_string(threads_per_process - 1) +
                              " (threads_per_process=" + std::to_string(threads_per_process) + ")");
  }
  const int64_t world = topology.layout(threads_per_process).WideWorldSize();
  if (world > std::numeric_limits<int>::max()) {
    throw ParallelConfigError(
        "nnodes × processes_per_node × threads_per_process = " + std::to_string(world) +
        ": expected at most " + std::to_string(std::numeric_limits<int>::max()) + " ranks");
  }
}

int Rank::world_size() const {
  if (renumbered()) return renumbered_world_size_;
  return topology_.layout(threads_per_process_).world_size();
}

int Rank::global_rank() const {
  return renumbered() ? renumbered_global_rank_ : launch_global_rank();
}

int Rank::launch_global_rank() const {
  return topology_.layout(threads_per_process_)
      .GlobalRankOfProcess(topology_.global_proc_rank, thread_rank_);
}

Rank Rank::Renumbered(int global_rank, int world_size) const {
  if (world_size < 1 || global_rank < 0 || global_rank >= world_size) {
    throw ParallelConfigError("renumbered rank " + std::to_string(global_rank) + " of " +
                              std::to_string(world_size) +
                              ": expected a rank in [0, world size) of at least one rank");
  }
  Rank renumbered = *this;
  renumbered.renumbered_world_size_ = world_size;
  renumbered.renumbered_global_rank_ = global_rank;
  return renumbered;
}

std::string Rank::ToString() const {
  const std::string launched =
      renumbered() ? "launched as " + std::to_string(launch_global_rank()) + ", " : "";
  return "rank " + std::to_string(global_rank()) + "/" + std::to_string(world_size()) + " (" +
         launched + "node " + std::to_string(node_rank()) + "/" + std::to_string(nnodes()) +
         ", process " + std::to_string(global_proc_rank()) + " local " +
         std::to_string(local_proc_rank()) + ", thread " + std::to_string(thread_rank()) + "/" +
         std::to_string(threads_per_process()) + ")";
}

int DeviceIndexAmongVisible(const Rank& rank, bool isolated) {
  return isolated ? rank.thread_rank() : rank.local_device_index();
}

bool SharesDevice(const Rank& rank, DLDeviceType device_type, int visible_device_count,
                  bool isolated) {
  const int wanted = isolated ? rank.threads_per_process() : rank.local_world_size();
  return device_type != kDLCPU && wanted > visible_device_count;
}

int SelectDeviceIndex(const Rank& rank, DLDeviceType device_type, int visible_device_count,
                      const DevicePlacement& placement) {
  if (device_type == kDLCPU) return 0;
  const std::string& variable = placement.visible_devices_variable;
  const std::string visible = std::to_string(visible_device_count) + " visible device" +
                              (visible_device_count == 1 ? "" : "s") +
                              (variable.empty() ? "" : " (" + variable + ")");
  // The backend names its own visibility variable (CUDA_VISIBLE_DEVICES,
  // ASCEND_RT_VISIBLE_DEVICES, ...); the caller passes it with its value.
  const std::string variable_hint =
      variable.empty() ? "the vendor's visibility variable" : variable;
  if (visible_device_count < 1) {
    throw ParallelConfigError(
        "the backend sees no device on this node: expected at least 1 "
        "(check the driver and " +
        variable_hint + ")");
  }
  const int index = DeviceIndexAmongVisible(rank, placement.isolated);
  if (index < visible_device_count) return index;
  if (placement.allow_sharing) return index % visible_device_count;
  if (placement.isolated) {
    throw ParallelConfigError(
        "thread_rank " + std::to_string(rank.thread_rank()) + " needs " +
        std::to_string(rank.threads_per_process()) +
        " devices in this process (INFINI_CCL_DEVICES_ISOLATED=1: the visible devices are the "
        "process's own), but there " +
        (visible_device_count == 1 ? "is " : "are ") + visible +
        ": give each process as many devices as it has threads, or set "
        "INFINI_CCL_ALLOW_DEVICE_SHARING=1 to share devices on a backend that can");
  }
  throw ParallelConfigError(
      "local device index " + std::to_string(index) + " (local_proc_rank " +
      std::to_string(rank.local_proc_rank()) + " × threads_per_process " +
      std::to_string(rank.threads_per_process()) + " + thread_rank " +
      std::to_string(rank.thread_rank()) + ") needs " + std::to_string(rank.local_world_size()) +
      " devices on this node, but there " + (visible_device_count == 1 ? "is " : "are ") + visible +
      ": start fewer processes or threads per node, make more devices visible (" + variable_hint +
      " lists the ones a process may use), or set "
      "INFINI_CCL_ALLOW_DEVICE_SHARING=1 to share devices on a backend that can");
}

}  // namespace infini::parallel
