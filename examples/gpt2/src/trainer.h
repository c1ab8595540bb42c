// The data-parallel training loop: every rank runs it with the same options.
#pragma once

#include <iosfwd>
#include <vector>

#include "data_parallel.h"
#include "options.h"

namespace infini::examples::gpt2 {

struct TrainingSummary {
  int64_t first_step = 0;  // 0, or the step a resumed run started from
  int64_t steps_done = 0;
  std::vector<float> step_losses;  // mean over all ranks, one per step run here
  float validation_loss = -1.0f;   // last one computed; -1 when none was
  double seconds = 0.0;
};

// Trains on options.train_data (which must be set). Rank 0 writes progress
// lines to `log`. Throws std::runtime_error (or a subclass) with one line for
// bad data, a mismatching checkpoint or a failed collective.
TrainingSummary Train(const TrainOptions& options, DataParallelGroup& group, std::ostream& log);

}  // namespace infini::examples::gpt2
