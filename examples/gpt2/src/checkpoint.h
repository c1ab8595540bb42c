// Checkpoints: weights, AdamW state and the data loader's position, so a
// resumed run continues exactly (bit for bit) where the saved one stopped.
// Only rank 0 reads and writes them; the trainer broadcasts what it read.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "adamw.h"
#include "model.h"

namespace infini::examples::gpt2 {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainingProgress {
  int64_t steps_done = 0;
  int64_t consumed_samples = 0;  // the data loader's state after steps_done
};

// <directory>/step_<steps_done, 8 digits>.ckpt
std::string CheckpointPath(const std::string& directory, int64_t steps_done);

// Writes the checkpoint whole or not at all (a temporary file, then a
// rename); creates `directory` when missing. Throws CheckpointError naming
// the path.
void SaveCheckpoint(const std::string& directory, const Model& model, AdamW& optimizer,
                    const TrainingProgress& progress);

// The checkpoint with the most steps in `directory`, or "" when it has none
// (or does not exist).
std::string LatestCheckpoint(const std::string& directory);

// Loads `path` into `model` and `optimizer`. Throws CheckpointError for an
// unreadable, truncated or foreign file, or one saved from a model of another
// shape (naming the field and both values).
TrainingProgress LoadCheckpoint(const std::string& path, Model& model, AdamW& optimizer);

}  // namespace infini::examples::gpt2
