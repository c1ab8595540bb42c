// gpt2's command line. Every bad value becomes one UsageError line naming the
// flag, the value and what was expected; main turns it into exit code 2.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "model.h"

namespace infini::examples::gpt2 {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainOptions {
  ModelConfig model;  // vocab 256 (bytes), the rest from flags
  int64_t micro_batch_size = 4;
  int64_t gradient_accumulation_steps = 1;
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

// Parses argv (--name=value or --name value; --flag alone for booleans).
// Throws UsageError for an unknown flag, a missing or malformed value or a
// value out of range.
TrainOptions ParseTrainOptions(const std::vector<std::string>& arguments);

// The --help text.
std::string TrainUsage();

}  // namespace infini::examples::gpt2
