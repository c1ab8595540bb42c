#include "infini/data/sampler.h"

#include <random>
#include <string>

#include "infini/data/error.h"

namespace infini::data {
namespace {

uint64_t SplitMix64(uint64_t value) {
  uint64_t z = value + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound] without modulo bias. std::uniform_int_distribution is
// not used because its algorithm differs between standard libraries.
uint64_t UniformUpTo(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t range = bound + 1;
  if (range == 0) return engine();                    // bound is the full 64-bit range
  const uint64_t reject_below = (0 - range) % range;  // 2^64 mod range
  uint64_t draw = engine();
  while (draw < reject_below) draw = engine();
  return draw % range;
}

void RequirePositive(const char* name, int64_t value) {
  if (value <= 0) {
    throw InvalidArgumentError(std::string(name) + "=" + std::to_string(value) +
                               ": expected a positive number");
  }
}

}  // namespace

std::vector<int64_t> ShuffledOrder(int64_t num_samples, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(num_samples));
  for (int64_t i = 0; i < num_samples; ++i) order[static_cast<size_t>(i)] = i;
  std::mt19937_64 engine(SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(epoch))));
  for (int64_t i = num_samples - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(UniformUpTo(engine, static_cast<uint64_t>(i)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

BatchSampler::BatchSampler(const SamplerOptions& options, int64_t consumed_samples)
    : options_(options) {
  RequirePositive("num_samples", options.num_samples);
  RequirePositive("micro_batch_size", options.micro_batch_size);
  RequirePositive("data_parallel_size", options.data_parallel_size);
  RequirePositive("gradient_accumulation_steps", options.gradient_accumulation_steps);
  if (options.data_parallel_rank < 0 || options.data_parallel_rank >= options.data_parallel_size) {
    throw InvalidArgumentError("data_parallel_rank=" + std::to_string(options.data_parallel_rank) +
                               ": expected a rank in [0, data_parallel_size=" +
                               std::to_string(options.data_parallel_size) + ")");
  }
  global_batch_size_ =
      options.micro_batch_size * options.data_parallel_size * options.gradient_accumulation_steps;
  if (options.tail_policy == TailPolicy::kDrop && options.num_samples < global_batch_size_) {
    throw InvalidArgumentError(
        "num_samples=" + std::to_string(options.num_samples) +
        " is smaller than one global batch (micro_batch_size=" +
        std::to_string(options.micro_batch_size) +
        " x data_parallel_size=" + std::to_string(options.data_parallel_size) +
        " x gradient_accumulation_steps=" + std::to_string(options.gradient_accumulation_steps) +
        " = " + std::to_string(global_batch_size_) +
        "): expected at least one global batch, or pad the tail");
  }
  set_consumed_samples(consumed_samples);
}

int64_t BatchSampler::samples_per_rank_per_step() const {
  return options_.micro_batch_size * options_.gradient_accumulation_steps;
}

int64_t BatchSampler::steps_per_epoch() const {
  if (options_.tail_policy == TailPolicy::kDrop) return options_.num_samples / global_batch_size_;
  return (options_.num_samples + global_batch_size_ - 1) / global_batch_size_;
}

void BatchSampler::set_consumed_samples(int64_t consumed_samples) {
  if (consumed_samples < 0) {
    throw InvalidArgumentError("consumed_samples=" + std::to_string(consumed_samples) +
                               ": expected a number >= 0");
  }
  consumed_samples_ = consumed_samples;
}

int64_t BatchSampler::epoch() const { return StepStart(consumed_samples_) / options_.num_samples; }

int64_t BatchSampler::StepStart(int64_t consumed_samples) const {
  const int64_t num_samples = options_.num_samples;
  const int64_t offset = consumed_samples % num_samples;
  if (options_.tail_policy == TailPolicy::kDrop && num_samples - offset < global_batch_size_) {
    return consumed_samples - offset + num_samples;
  }
  return consumed_samples;
}

int64_t BatchSampler::NextConsumed(int64_t consumed_samples) const {
  const int64_t start = StepStart(consumed_samples);
  const int64_t epoch_end = (start / options_.num_samples + 1) * options_.num_samples;
  const int64_t next = start + global_batch_size_;
  // A step that reaches the epoch's end, or leaves only a tail that kDrop
  // never reads, ends the epoch: the state then names the next epoch.
  if (next >= epoch_end) return epoch_end;
  return StepStart(next);
}

int64_t BatchSampler::SampleAt(int64_t epoch, int64_t position) const {
  if (!options_.shuffle) return position;
  if (cached_epoch_ != epoch) {
    cached_order_ = ShuffledOrder(options_.num_samples, options_.seed, epoch);
    cached_epoch_ = epoch;
  }
  return cached_order_[static_cast<size_t>(position)];
}

std::vector<int64_t> BatchSampler::GlobalBatch(int64_t consumed_samples) const {
  const int64_t start = StepStart(consumed_samples);
  const int64_t epoch = start / options_.num_samples;
  const int64_t first_position = start % options_.num_samples;
  std::vector<int64_t> batch(static_cast<size_t>(global_batch_size_));
  for (int64_t i = 0; i < global_batch_size_; ++i) {
    const int64_t position = first_position + i;
    batch[static_cast<size_t>(i)] =
        position < options_.num_samples ? SampleAt(epoch, position) : kPaddingIndex;
  }
  return batch;
}

StepPlan BatchSampler::PlanStep(int64_t consumed_samples) const {
  if (consumed_samples < 0) {
    throw InvalidArgumentError("consumed_samples=" + std::to_string(consumed_samples) +
                               ": expected a number >= 0");
  }
  const std::vector<int64_t> global = GlobalBatch(consumed_samples);
  const int64_t mbs = options_.micro_batch_size;
  const int64_t micro_step_span = mbs * options_.data_parallel_size;
  StepPlan plan;
  plan.epoch = StepStart(consumed_samples) / options_.num_samples;
  plan.consumed_samples = consumed_samples;
  plan.sample_indices.reserve(static_cast<size_t>(samples_per_rank_per_step()));
  for (int64_t micro_step = 0; micro_step < options_.gradient_accumulation_steps; ++micro_step) {
    const int64_t slice_begin = micro_step * micro_step_span + options_.data_parallel_rank * mbs;
    for (int64_t k = 0; k < mbs; ++k) {
      plan.sample_indices.push_back(global[static_cast<size_t>(slice_begin + k)]);
    }
  }
  return plan;
}

StepPlan BatchSampler::Next() {
  StepPlan plan = PlanStep(consumed_samples_);
  consumed_samples_ = NextConsumed(consumed_samples_);
  return plan;
}

}  // namespace infini::data
