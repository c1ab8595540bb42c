#pragma once

#include <dlpack/dlpack.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "infini/data/sampler.h"
#include "infini/data/token_file.h"

namespace infini::data {

struct LoaderOptions {
  int64_t micro_batch_size = 1;
  int64_t data_parallel_size = 1;
  int64_t data_parallel_rank = 0;
  int64_t gradient_accumulation_steps = 1;
  TailPolicy tail_policy = TailPolicy::kDrop;
  bool shuffle = false;
  uint64_t seed = 0;
  // Micro-batches prepared ahead on a background thread; 0 reads on the
  // caller's thread.
  int64_t prefetch_micro_batches = 0;
  // How long Next() waits for the prefetch thread before it throws.
  std::chrono::milliseconds prefetch_timeout{std::chrono::minutes(10)};
  // Target token written in every position of a padding row (inputs get 0),
  // so a loss with this ignore index skips padding.
  int64_t padding_target = -1;
};

// A checkpointable position: the sampler's consumed_samples (see BatchSampler).
struct LoaderState {
  int64_t consumed_samples = 0;
};

// What Next() delivered besides the tokens.
struct MicroBatchInfo {
  int64_t epoch = 0;
  int64_t micro_step = 0;  // in [0, gradient_accumulation_steps)
  // The state at the start of this optimizer step.
  int64_t consumed_samples = 0;
  // micro_batch_size entries; kPaddingIndex for a padding row.
  std::vector<int64_t> sample_indices;
  // micro_batch_size entries; 1 for a real sample, 0 for padding.
  std::vector<uint8_t> valid;
};

// Reads this rank's micro-batches, in the order of a BatchSampler, into
// caller-provided host buffers of micro_batch_size × sequence_length tokens
// (row-major): inputs are window[0, T) and targets window[1, T+1) of each
// sample. Epochs cycle, so Next() always delivers. One consumer thread.
class DataLoader {
 public:
  // Throws InvalidArgumentError for bad options (see BatchSampler).
  DataLoader(std::shared_ptr<const SampleSource> source, const LoaderOptions& options,
             LoaderState state = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t micro_batch_size() const;
  int64_t global_batch_size() const;
  int64_t steps_per_epoch() const;
  int64_t sequence_length() const;
  // micro_batch_size × sequence_length.
  int64_t tokens_per_micro_batch() const;

  // Fill the next micro-batch. Throws InvalidArgumentError for a buffer of
  // the wrong size, or rethrows what went wrong while reading (also when it
  // happened on the prefetch thread).
  MicroBatchInfo Next(std::span<int32_t> inputs, std::span<int32_t> targets);
  MicroBatchInfo Next(std::span<int64_t> inputs, std::span<int64_t> targets);
  // The same into dlpack tensors: host memory (kDLCPU or kDLCUDAHost),
  // dtype int32 or int64, shape [micro_batch_size, sequence_length], compact.
  MicroBatchInfo Next(const DLTensor& inputs, const DLTensor& targets);

  // Position after the micro-batches delivered so far. Taken in the middle
  // of an optimizer step it names the start of that step, so a resumed run
  // repeats the step whose update never happened.
  LoaderState state() const;
  // Continue from `state` (drops anything prefetched). Throws
  // InvalidArgumentError for a negative consumed_samples.
  void load_state(const LoaderState& state);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace infini::data
