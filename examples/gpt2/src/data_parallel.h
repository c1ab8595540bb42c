// What the trainer needs from the communication layer: who am I, average
// these gradients, copy rank 0's bytes everywhere. The training loop never
// sees a backend, a device or a store.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace infini::examples::gpt2 {

class DataParallelGroup {
 public:
  virtual ~DataParallelGroup() = default;

  // The group of every rank of this run, from the launcher's environment
  // (infini_run, torchrun, or none: one rank). `backend_spec` names the
  // collective backend ("" = INFINI_CCL_BACKEND, else auto); a single rank
  // loads none. Throws std::runtime_error with one line on a bad environment,
  // a backend that does not load or peers that never show up.
  static std::unique_ptr<DataParallelGroup> Create(const std::string& backend_spec);

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  bool is_main() const { return rank() == 0; }
  // "gloo (cpu)", "nccl (cuda:0)", or "none" for a single rank.
  virtual std::string description() const = 0;

  // Every rank ends with the element-wise mean of all ranks' `values`.
  virtual void AllReduceAverage(std::span<float> values) = 0;
  // Every rank ends with rank 0's `bytes`.
  virtual void BroadcastFromMain(std::span<std::byte> bytes) = 0;
};

}  // namespace infini::examples::gpt2
