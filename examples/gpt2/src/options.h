// gpt2's command line. Every bad value becomes one UsageError line naming the
// flag, the value and what was expected; main turns it into exit code 2.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "infini/common/command_line.h"
#include "model.h"

namespace infini::examples::gpt2 {

class UsageError : public cli::UsageError {
 public:
  using cli::UsageError::UsageError;
};

// How the gradients of data-parallel ranks meet (device training).
enum class GradientSync {
  kOverlap,        // GradientReducer: buckets all-reduced during backward (default)
  kAfterBackward,  // one all-reduce of every gradient after backward (--overlap=false)
  kNone,           // none (--no_grad_sync: measures the exposed communication)
};

enum class TrainDtype { kFloat32, kBFloat16 };

struct TrainOptions {
  std::string model_name = "tiny";  // tiny: vocab 256 (bytes), the rest from flags; d12: GPT-2 124M
  ModelConfig model;
  int64_t sequence_length = 64;  // tokens per sample; <= model.max_sequence_length
  int64_t micro_batch_size = 4;
  int64_t gradient_accumulation_steps = 1;
  int64_t total_batch_size = 0;  // tokens per step over all ranks; 0: from the accumulation
  TrainDtype dtype = TrainDtype::kFloat32;
  int nthread_per_process = 1;
  GradientSync gradient_sync = GradientSync::kOverlap;
  int64_t bucket_size_mb = 25;
  bool register_buckets = true;       // --overlap's buckets registered with the communicator
  int64_t throughput_skip_steps = 2;  // steps left out of the throughput average
  int64_t steps = 20;
  float learning_rate = 3e-3f;
  float weight_decay = 0.0f;
  float grad_clip = 1.0f;
  uint64_t seed = 1337;
  bool shuffle = true;

  std::string train_data;  // empty: the bundled tiny corpus
  std::string val_data;    // empty: the bundled tiny corpus' held-out part
  int64_t val_every = 0;   // steps between validations; 0: only after the last step
  int64_t val_batches = 4;

  std::string checkpoint_dir;    // empty: no checkpoints
  int64_t checkpoint_every = 0;  // 0: only after the last step
  bool resume = false;

  std::string ccl_backend;  // empty: INFINI_CCL_BACKEND, else auto
  int64_t log_every = 1;
  bool help = false;
};

// Parses argv with the one parser (infini/common/command_line.h:
// --name=value, --name value, --flag/--noflag for booleans, did you mean).
// Throws UsageError for an unknown flag, a missing or malformed value or a
// value out of range. Flags carry InfiniTrain's gpt2 names where the meaning
// is the same (--input_bin, --batch_size, --num_iteration, ...); the older
// names stay as aliases.
TrainOptions ParseTrainOptions(const std::vector<std::string>& arguments);

// The --help text.
std::string TrainUsage();

// The gradient-accumulation steps that make --total_batch_size tokens per
// step with `data_parallel_size` ranks (options.gradient_accumulation_steps
// when total_batch_size is 0). Throws UsageError when it does not divide.
int64_t AccumulationSteps(const TrainOptions& options, int64_t data_parallel_size);

const char* DtypeName(TrainDtype dtype);

}  // namespace infini::examples::gpt2
