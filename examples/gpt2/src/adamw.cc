#include "adamw.h"

#include <cmath>
#include <stdexcept>

namespace infini::examples::gpt2 {

AdamW::AdamW(const std::vector<ParameterTensor>& tensors, int64_t num_parameters,
             const AdamWOptions& options)
    : options_(options),
      decays_(num_parameters, 0),
      first_moment_(num_parameters, 0.0f),
      second_moment_(num_parameters, 0.0f) {
  for (const ParameterTensor& tensor : tensors) {
    if (tensor.offset + tensor.count > num_parameters) {
      throw std::logic_error("AdamW: tensor " + tensor.name + " lies outside the parameters");
    }
    for (int64_t i = 0; i < tensor.count; ++i) decays_[tensor.offset + i] = tensor.decays;
  }
}

void AdamW::Step(std::span<float> parameters, std::span<const float> gradients) {
  if (parameters.size() != first_moment_.size() || gradients.size() != first_moment_.size()) {
    throw std::logic_error("AdamW::Step: buffers do not match the optimizer's size");
  }
  ++steps_taken_;
  const float step = static_cast<float>(steps_taken_);
  const float first_correction = 1.0f - std::pow(options_.beta1, step);
  const float second_correction = 1.0f - std::pow(options_.beta2, step);
  const float lr = options_.learning_rate;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const float g = gradients[i];
    float& m = first_moment_[i];
    float& v = second_moment_[i];
    m = options_.beta1 * m + (1.0f - options_.beta1) * g;
    v = options_.beta2 * v + (1.0f - options_.beta2) * g * g;
    const float m_hat = m / first_correction;
    const float v_hat = v / second_correction;
    const float decay = decays_[i] ? options_.weight_decay * parameters[i] : 0.0f;
    parameters[i] -= lr * (m_hat / (std::sqrt(v_hat) + options_.epsilon) + decay);
  }
}

float ClipGradientNorm(std::span<float> gradients, float max_norm) {
  double sum_of_squares = 0.0;
  for (float g : gradients) sum_of_squares += static_cast<double>(g) * g;
  const float norm = static_cast<float>(std::sqrt(sum_of_squares));
  if (max_norm > 0.0f && norm > max_norm) {
    const float scale = max_norm / norm;
    for (float& g : gradients) g *= scale;
  }
  return norm;
}

}  // namespace infini::examples::gpt2
