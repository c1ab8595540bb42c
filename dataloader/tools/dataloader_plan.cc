// Prints, for one data-parallel rank, the global sample indices it reads at
// each optimizer step: for users debugging a resume, and for checking the
// sampler's semantics.
//
//   dataloader_plan --num_samples=20 --micro_batch_size=2 --dp_size=2 --dp_rank=1
//       --consumed_samples=8 --steps=2
//   step=0 epoch=0 consumed_samples=8 samples=10,11
//   step=1 epoch=0 consumed_samples=12 samples=14,15

#include <gflags/gflags.h>

#include <cstdio>
#include <iostream>
#include <limits>
#include <string>

#include "infini/common/flags.h"
#include "infini/common/one_line.h"
#include "infini/data/error.h"
#include "infini/data/sampler.h"
#include "infini/data/token_file.h"

DEFINE_int64(num_samples, 0, "Samples in the dataset (or give --data_file and --sequence_length)");
DEFINE_string(data_file, "", "An llm.c .bin token file; its sample count replaces --num_samples");
DEFINE_int64(sequence_length, 0, "Tokens per sample (input length) when --data_file is given");
DEFINE_int64(micro_batch_size, 1, "Samples per rank per micro-step");
DEFINE_int64(dp_size, 1, "Data-parallel size");
DEFINE_int64(dp_rank, 0, "Data-parallel rank to print, in [0, dp_size)");
DEFINE_int64(gradient_accumulation_steps, 1, "Micro-steps per optimizer step");
DEFINE_int64(consumed_samples, 0, "Sampler state to start from (a checkpoint's consumed_samples)");
DEFINE_bool(shuffle, false, "Shuffle each epoch, seeded by (--seed, epoch)");
DEFINE_uint64(seed, 0, "Shuffle seed");
DEFINE_bool(pad_tail, false,
            "Pad the last incomplete global batch (index -1) instead of dropping it");
DEFINE_int64(steps, 10, "Optimizer steps to print");

namespace {

using infini::data::BatchSampler;
using infini::data::InvalidArgumentError;

// The plan holds one global batch of indices, and a shuffled epoch holds
// one index per sample: bounds that keep both within a few hundred MiB.
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 24;
constexpr int64_t kMaxShuffledSamples = int64_t{1} << 26;
constexpr int64_t kMaxSequenceLength = int64_t{1} << 30;
// A billion steps is a billion lines; 2^48 samples is beyond any token file
// (a file of that many one-token samples would hold 512 TiB).
constexpr int64_t kMaxSteps = 1'000'000'000;
constexpr int64_t kMaxSamples = int64_t{1} << 48;

std::string Flag(const char* name, int64_t value) {
  return std::string("--") + name + "=" + std::to_string(value);
}

void RequireInRange(const char* name, int64_t value, int64_t low, int64_t high) {
  if (value < low || value > high) {
    throw InvalidArgumentError(Flag(name, value) + ": expected a number in [" +
                               std::to_string(low) + ", " + std::to_string(high) + "]");
  }
}

// micro_batch_size × dp_size × gradient_accumulation_steps, overflow
// included, at most kMaxGlobalBatch.
int64_t CheckedGlobalBatch() {
  int64_t product = 0;
  const std::string text = Flag("micro_batch_size", FLAGS_micro_batch_size) + " x " +
                           Flag("dp_size", FLAGS_dp_size) + " x " +
                           Flag("gradient_accumulation_steps", FLAGS_gradient_accumulation_steps);
  if (__builtin_mul_overflow(FLAGS_micro_batch_size, FLAGS_dp_size, &product) ||
      __builtin_mul_overflow(product, FLAGS_gradient_accumulation_steps, &product) ||
      product > kMaxGlobalBatch) {
    throw InvalidArgumentError(text + ": expected a global batch of at most " +
                               std::to_string(kMaxGlobalBatch) + " samples");
  }
  return product;
}

// Each step advances the state by at most one epoch plus one global batch,
// and the sampler looks one epoch further: its arithmetic must stay within
// int64 for every step printed.
void RequireNoOverflowOverSteps(int64_t num_samples, int64_t global_batch) {
  int64_t per_step = 0;
  int64_t end = 0;
  if (__builtin_add_overflow(num_samples, global_batch, &per_step) ||
      __builtin_mul_overflow(FLAGS_steps + 2, per_step, &end) ||
      __builtin_add_overflow(end, FLAGS_consumed_samples, &end)) {
    throw InvalidArgumentError(Flag("consumed_samples", FLAGS_consumed_samples) + " with " +
                               Flag("steps", FLAGS_steps) + " and " + std::to_string(num_samples) +
                               " samples: the sample count after the last step overflows a "
                               "64-bit integer; expected smaller values");
  }
}

int64_t ResolveNumSamples() {
  if (FLAGS_data_file.empty()) {
    if (FLAGS_num_samples <= 0 || FLAGS_num_samples > kMaxSamples) {
      throw InvalidArgumentError("--num_samples=" + std::to_string(FLAGS_num_samples) +
                                 ": expected a number in [1, " + std::to_string(kMaxSamples) +
                                 "] (or --data_file)");
    }
    return FLAGS_num_samples;
  }
  RequireInRange("sequence_length", FLAGS_sequence_length, 1, kMaxSequenceLength);
  if (FLAGS_num_samples != 0) {
    throw InvalidArgumentError("--num_samples=" + std::to_string(FLAGS_num_samples) +
                               " and --data_file='" + infini::OneLine(FLAGS_data_file) + "'" +
                               ": expected only one of them");
  }
  return infini::data::TokenDataset(FLAGS_data_file, FLAGS_sequence_length).num_samples();
}

std::string FormatStep(int64_t step, const infini::data::StepPlan& plan, int64_t micro_batch_size) {
  std::string line = "step=" + std::to_string(step) + " epoch=" + std::to_string(plan.epoch) +
                     " consumed_samples=" + std::to_string(plan.consumed_samples) + " samples=";
  for (size_t i = 0; i < plan.sample_indices.size(); ++i) {
    if (i > 0) line += (i % static_cast<size_t>(micro_batch_size) == 0) ? ";" : ",";
    line += std::to_string(plan.sample_indices[i]);
  }
  return line;
}

void PrintPlan() {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // The library names its own fields; the flags are spelled differently.
  RequireInRange("steps", FLAGS_steps, 0, kMaxSteps);
  RequireInRange("consumed_samples", FLAGS_consumed_samples, 0, kMax);
  RequireInRange("micro_batch_size", FLAGS_micro_batch_size, 1, kMaxGlobalBatch);
  RequireInRange("dp_size", FLAGS_dp_size, 1, kMaxGlobalBatch);
  RequireInRange("gradient_accumulation_steps", FLAGS_gradient_accumulation_steps, 1,
                 kMaxGlobalBatch);
  if (FLAGS_dp_rank < 0 || FLAGS_dp_rank >= FLAGS_dp_size) {
    throw InvalidArgumentError(
        "--dp_rank=" + std::to_string(FLAGS_dp_rank) +
        ": expected a rank in [0, --dp_size=" + std::to_string(FLAGS_dp_size) + ")");
  }
  const int64_t global_batch = CheckedGlobalBatch();
  const int64_t num_samples = ResolveNumSamples();
  if (FLAGS_shuffle && num_samples > kMaxShuffledSamples) {
    throw InvalidArgumentError("--shuffle with " + std::to_string(num_samples) +
                               " samples: expected at most " + std::to_string(kMaxShuffledSamples) +
                               " (a shuffled epoch holds one index per sample)");
  }
  RequireNoOverflowOverSteps(num_samples, global_batch);
  infini::data::SamplerOptions options;
  options.num_samples = num_samples;
  options.micro_batch_size = FLAGS_micro_batch_size;
  options.data_parallel_size = FLAGS_dp_size;
  options.data_parallel_rank = FLAGS_dp_rank;
  options.gradient_accumulation_steps = FLAGS_gradient_accumulation_steps;
  options.tail_policy =
      FLAGS_pad_tail ? infini::data::TailPolicy::kPad : infini::data::TailPolicy::kDrop;
  options.shuffle = FLAGS_shuffle;
  options.seed = FLAGS_seed;
  BatchSampler sampler(options, FLAGS_consumed_samples);
  for (int64_t step = 0; step < FLAGS_steps; ++step) {
    std::cout << FormatStep(step, sampler.Next(), options.micro_batch_size) << '\n';
  }
}

}  // namespace

int main(int argc, char** argv) {
  infini::flags::Parse(
      &argc, &argv,
      "dataloader_plan --num_samples=N --micro_batch_size=B --dp_size=D --dp_rank=R\n"
      "                       [--gradient_accumulation_steps=A] [--consumed_samples=C]\n"
      "                       [--shuffle --seed=S] [--pad_tail] --steps=K",
      "Prints the global sample indices one data-parallel rank reads at each step,\n"
      "one line per step: step=K epoch=E consumed_samples=C samples=i,i;i,i\n"
      "(';' separates micro-steps, -1 marks padding).");
  if (argc > 1) {
    std::cerr << "dataloader_plan: unexpected argument '" << infini::OneLine(argv[1])
              << "': expected only --flags (see --help)\n";
    return 2;
  }
  try {
    PrintPlan();
  } catch (const infini::data::Error& error) {
    std::cerr << "dataloader_plan: " << infini::OneLine(error.what()) << '\n';
    return 2;
  }
  return 0;
}
