#pragma once

#include <cstdint>
#include <vector>

namespace infini::data {

// What happens to the last global batch of an epoch when fewer samples than a
// global batch remain.
enum class TailPolicy {
  kDrop,  // never read (Megatron's default, drop_last=True)
  kPad,   // read; the missing positions are padding (index kPaddingIndex)
};

// Sample index of a padding position; a trainer skips it in the loss.
inline constexpr int64_t kPaddingIndex = -1;

struct SamplerOptions {
  int64_t num_samples = 0;       // samples in the dataset, indices [0, num_samples)
  int64_t micro_batch_size = 1;  // samples per rank per micro-step
  int64_t data_parallel_size = 1;
  int64_t data_parallel_rank = 0;
  // Micro-steps per optimizer step on each rank (gradient accumulation).
  int64_t gradient_accumulation_steps = 1;
  TailPolicy tail_policy = TailPolicy::kDrop;
  bool shuffle = false;
  uint64_t seed = 0;
};

// The samples of one optimizer step (one global batch).
struct StepPlan {
  int64_t epoch = 0;
  // Sampler state before this step; resuming from it repeats this step.
  int64_t consumed_samples = 0;
  // gradient_accumulation_steps × micro_batch_size entries: micro-step m of
  // this rank is [m·mbs, (m+1)·mbs). kPaddingIndex marks padding.
  std::vector<int64_t> sample_indices;
};

// Megatron-style distributed batch sampler.
//
// A global batch has global_batch_size() = micro_batch_size ×
// data_parallel_size × gradient_accumulation_steps samples at consecutive
// positions of the epoch's order (identity, or a permutation seeded by
// (seed, epoch)). Micro-step m covers positions [m·mbs·dp, (m+1)·mbs·dp) of the
// global batch and rank r takes [r·mbs, (r+1)·mbs) of that slice.
//
// State is consumed_samples, a position in the stream of epochs where each
// epoch spans num_samples positions: epoch = consumed / num_samples. A
// dropped or padded tail advances consumed_samples to the next epoch start,
// so the state means the same thing for any batch shape, and a run resumes
// exactly, also with another DP size, micro-batch or accumulation.
// Every rank computes the same order from (seed, epoch) alone.
class BatchSampler {
 public:
  // Throws InvalidArgumentError for a non-positive size, a rank outside
  // [0, data_parallel_size), or (with kDrop) fewer samples than one global batch.
  explicit BatchSampler(const SamplerOptions& options, int64_t consumed_samples = 0);

  const SamplerOptions& options() const { return options_; }
  int64_t global_batch_size() const { return global_batch_size_; }
  int64_t samples_per_rank_per_step() const;
  // Optimizer steps per epoch (counting a padded tail step).
  int64_t steps_per_epoch() const;

  int64_t consumed_samples() const { return consumed_samples_; }
  // Throws InvalidArgumentError for a negative value.
  void set_consumed_samples(int64_t consumed_samples);
  int64_t epoch() const;

  // The global batch that starts at `consumed_samples`, all ranks' samples in
  // global-batch order (for checking and planning tools).
  std::vector<int64_t> GlobalBatch(int64_t consumed_samples) const;
  // This rank's part of the step starting at `consumed_samples`; does not advance.
  StepPlan PlanStep(int64_t consumed_samples) const;
  // consumed_samples after the step that starts at `consumed_samples`.
  int64_t NextConsumed(int64_t consumed_samples) const;

  // This rank's next step; advances consumed_samples.
  StepPlan Next();

 private:
  // Start of the step actually read from `consumed_samples` (skips to the next
  // epoch when the rest of this epoch is a tail that kDrop never reads).
  int64_t StepStart(int64_t consumed_samples) const;
  int64_t SampleAt(int64_t epoch, int64_t position) const;

  SamplerOptions options_;
  int64_t global_batch_size_;
  int64_t consumed_samples_;
  // Permutation of the last epoch asked for (shuffle only).
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_order_;
};

// The epoch's sample order when shuffling: a Fisher-Yates shuffle of
// [0, num_samples) driven by std::mt19937_64 seeded with
// SplitMix64(seed ^ SplitMix64(epoch)); bounded draws by rejection sampling.
// Fully specified, so every rank and every platform gets the same order.
std::vector<int64_t> ShuffledOrder(int64_t num_samples, uint64_t seed, int64_t epoch);

}  // namespace infini::data
