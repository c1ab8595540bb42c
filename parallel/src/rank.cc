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
  const int64_t world =
      int64_t{topology.nnodes} * topology.processes_per_node * threads_per_process;
  if (world > std::numeric_limits<int>::max()) {
    throw ParallelConfigError(
        "nnodes × processes_per_node × threads_per_process = " + std::to_string(world) +
        ": expected at most " + std::to_string(std::numeric_limits<int>::max()) + " ranks");
  }
}

int Rank::world_size() const {
  return topology_.nnodes * topology_.processes_per_node * threads_per_process_;
}

int Rank::global_rank() const {
  return topology_.global_proc_rank * threads_per_process_ + thread_rank_;
}

std::string Rank::ToString() const {
  return "rank " + std::to_string(global_rank()) + "/" + std::to_string(world_size()) + " (node " +
         std::to_string(node_rank()) + "/" + std::to_string(nnodes()) + ", process " +
         std::to_string(global_proc_rank()) + " local " + std::to_string(local_proc_rank()) +
         ", thread " + std::to_string(thread_rank()) + "/" + std::to_string(threads_per_process()) +
         ")";
}

int SelectDeviceIndex(const Rank& rank, DLDeviceType device_type, int visible_device_count,
                      bool allow_device_sharing, const std::string& visible_devices_variable) {
  if (device_type == kDLCPU) return 0;
  const std::string visible =
      std::to_string(visible_device_count) + " visible device" +
      (visible_device_count == 1 ? "" : "s") +
      (visible_devices_variable.empty() ? "" : " (" + visible_devices_variable + ")");
  // The backend names its own visibility variable (CUDA_VISIBLE_DEVICES,
  // ASCEND_RT_VISIBLE_DEVICES, ...); the caller passes it with its value.
  const std::string variable_hint = visible_devices_variable.empty()
                                        ? "the vendor's visibility variable"
                                        : visible_devices_variable;
  if (visible_device_count < 1) {
    throw ParallelConfigError(
        "the backend sees no device on this node: expected at least 1 "
        "(check the driver and " +
        variable_hint + ")");
  }
  const int index = rank.local_device_index();
  if (index < visible_device_count) return index;
  if (allow_device_sharing) return index % visible_device_count;
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
