// What the trainer needs from the communication layer: who am I, average
// these gradients, copy rank 0's bytes everywhere. The training loop never
// sees a backend, a device or a store.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace infini::parallel {
class Context;
class ProcessGroup;
}  // namespace infini::parallel

namespace infini::examples::gpt2 {

// A collective failed because a rank was lost, and the run recovers in
// place (infini_run --on_failure=shrink): call RecoverFromLoss.
class RankLostError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The world after a recovery.
struct RecoveredGroup {
  std::vector<int> newly_lost_ranks;  // the launcher's numbering (RANK)
  int world_size = 0;
  int rank = 0;
};

// The world after admitting ranks that joined the running run.
struct GrownGroup {
  std::vector<int> joined_ranks;  // the launcher's numbering (RANK)
  int world_size = 0;
  int rank = 0;
};

class DataParallelGroup {
 public:
  virtual ~DataParallelGroup() = default;

  // The group of every rank of this run, from the launcher's environment
  // (infini_run, torchrun, or none: one rank) and this process's thread
  // ranks (`thread_rank` of `threads_per_process`: one rank per thread and
  // device). `backend_spec` names the collective backend ("" =
  // INFINI_CCL_BACKEND, else auto); a run of one rank loads none unless a
  // backend is named (flag or variable), so `gpt2 --ccl_backend=nccl` alone
  // trains on one GPU. Throws std::runtime_error with one line on a bad
  // environment, a backend that does not load or peers that never show up.
  static std::unique_ptr<DataParallelGroup> Create(const std::string& backend_spec,
                                                   int thread_rank = 0,
                                                   int threads_per_process = 1);

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  bool is_main() const { return rank() == 0; }
  // "gloo (cpu)", "nccl (cuda:0)", or "none" for a single rank.
  virtual std::string description() const = 0;

  // Every rank ends with the element-wise mean of all ranks' `values`.
  virtual void AllReduceAverage(std::span<float> values) = 0;
  // Every rank ends with rank 0's `bytes`.
  virtual void BroadcastFromMain(std::span<std::byte> bytes) = 0;

  // Whether the backend's memory is a CUDA device's: the model then
  // computes there (device_training.h).
  virtual bool on_cuda_device() const { return false; }
  // The rank's runtime and its world group, for device training's gradient
  // reducer; null for a single rank without a backend.
  virtual std::shared_ptr<parallel::Context> context() const { return nullptr; }
  virtual parallel::ProcessGroup* process_group() { return nullptr; }

  // Whether a lost rank is recovered from in place (the launcher set
  // INFINI_ON_FAILURE=shrink): collectives then throw RankLostError.
  virtual bool recovers_from_loss() const { return false; }
  // After RankLostError: waits for the survivors and shrinks the group among
  // them; rank() and world_size() then say the new world. Throws
  // std::runtime_error (one line) when the run cannot go on.
  virtual RecoveredGroup RecoverFromLoss() {
    throw std::logic_error("RecoverFromLoss: this group does not recover from a loss");
  }
  // At a step boundary, on every rank together: admits the ranks of a node
  // that joined the running run (infini_run --on_failure=shrink), numbered
  // after the others; nothing when none wait. Throws RankLostError.
  virtual std::optional<GrownGroup> AdmitJoiners() { return std::nullopt; }
  // Whether this rank joined a running run: it was admitted when the group
  // was made, and takes rank 0's state before its first step.
  virtual bool joined_running_run() const { return false; }
};

}  // namespace infini::examples::gpt2
