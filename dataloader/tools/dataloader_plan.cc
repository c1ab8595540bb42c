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
#include <string>

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

int64_t ResolveNumSamples() {
  if (FLAGS_data_file.empty()) {
    if (FLAGS_num_samples <= 0) {
      throw InvalidArgumentError("--num_samples=" + std::to_string(FLAGS_num_samples) +
                                 ": expected a positive number (or --data_file)");
    }
    return FLAGS_num_samples;
  }
  if (FLAGS_num_samples != 0) {
    throw InvalidArgumentError("--num_samples=" + std::to_string(FLAGS_num_samples) +
                               " and --data_file=" + FLAGS_data_file +
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
  if (FLAGS_steps < 0) {
    throw InvalidArgumentError("--steps=" + std::to_string(FLAGS_steps) +
                               ": expected a number >= 0");
  }
  // The library names its own fields; the flags are spelled differently.
  if (FLAGS_dp_size <= 0) {
    throw InvalidArgumentError("--dp_size=" + std::to_string(FLAGS_dp_size) +
                               ": expected a positive number");
  }
  if (FLAGS_dp_rank < 0 || FLAGS_dp_rank >= FLAGS_dp_size) {
    throw InvalidArgumentError(
        "--dp_rank=" + std::to_string(FLAGS_dp_rank) +
        ": expected a rank in [0, --dp_size=" + std::to_string(FLAGS_dp_size) + ")");
  }
  infini::data::SamplerOptions options;
  options.num_samples = ResolveNumSamples();
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
  gflags::SetUsageMessage(
      "prints the global sample indices one data-parallel rank reads at each step\n"
      "  dataloader_plan --num_samples=N --micro_batch_size=B --dp_size=D --dp_rank=R\n"
      "                  [--gradient_accumulation_steps=A] [--consumed_samples=C]\n"
      "                  [--shuffle --seed=S] [--pad_tail] --steps=K\n"
      "one line per step: step=K epoch=E consumed_samples=C samples=i,i;i,i\n"
      "(';' separates micro-steps, -1 marks padding)");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (argc > 1) {
    std::cerr << "dataloader_plan: unexpected argument '" << argv[1]
              << "': expected only --flags (see --help)\n";
    return 2;
  }
  try {
    PrintPlan();
  } catch (const infini::data::Error& error) {
    std::cerr << "dataloader_plan: " << error.what() << '\n';
    return 2;
  }
  return 0;
}
