// AdamW (decoupled weight decay, Loshchilov & Hutter) over a model's flat
// parameter buffer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model.h"

namespace infini::examples::gpt2 {

struct AdamWOptions {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;  // applied to tensors whose ParameterTensor::decays
};

class AdamW {
 public:
  AdamW(const std::vector<ParameterTensor>& tensors, int64_t num_parameters,
        const AdamWOptions& options);

  // One update of `parameters` from `gradients` (same layout as the model's).
  void Step(std::span<float> parameters, std::span<const float> gradients);

  const AdamWOptions& options() const { return options_; }
  void set_learning_rate(float learning_rate) { options_.learning_rate = learning_rate; }

  // State for checkpoints: steps taken (bias correction) and both moments.
  int64_t steps_taken() const { return steps_taken_; }
  void set_steps_taken(int64_t steps_taken) { steps_taken_ = steps_taken; }
  std::span<float> first_moment() { return first_moment_; }
  std::span<float> second_moment() { return second_moment_; }

 private:
  AdamWOptions options_;
  std::vector<uint8_t> decays_;  // per parameter
  std::vector<float> first_moment_;
  std::vector<float> second_moment_;
  int64_t steps_taken_ = 0;
};

// Scales `gradients` so that their L2 norm is at most `max_norm` (no-op for
// max_norm <= 0); returns the norm before clipping.
float ClipGradientNorm(std::span<float> gradients, float max_norm);

}  // namespace infini::examples::gpt2
