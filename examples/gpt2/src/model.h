// A small GPT-2 (decoder-only transformer) with forward and backward passes
// written out on the host in float32, single-threaded. Small enough to read in
// one sitting, exact enough to check against finite differences.
//
//   tokens → token + position embedding → L × [ x + attn(ln1(x)); x + mlp(ln2(x)) ]
//          → final layernorm → logits = x · token_embeddingᵀ (tied) → cross-entropy
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace infini::examples::gpt2 {

struct ModelConfig {
  int64_t vocab_size = 256;  // byte-level tokens
  int64_t max_sequence_length = 64;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t channels = 64;
};

// Returns an empty string when `config` describes a model we can build, else
// one line naming the first bad field and what was expected.
std::string ValidateModelConfig(const ModelConfig& config);

// One named parameter tensor inside the flat parameter buffer.
struct ParameterTensor {
  std::string name;
  int64_t offset = 0;
  int64_t count = 0;
  // Weight decay applies to matrices and embeddings, not to biases or
  // layernorm gains (the usual AdamW practice).
  bool decays = false;
};

class Model {
 public:
  // Parameters start at zero; call InitializeWeights before training.
  explicit Model(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  const std::vector<ParameterTensor>& tensors() const { return tensors_; }
  int64_t num_parameters() const { return static_cast<int64_t>(parameters_.size()); }

  // All parameters, one flat buffer (what the optimizer steps and rank 0
  // broadcasts); gradients share its layout (what ranks all-reduce).
  std::span<float> parameters() { return parameters_; }
  std::span<const float> parameters() const { return parameters_; }
  std::span<float> gradients() { return gradients_; }
  std::span<const float> gradients() const { return gradients_; }

  // GPT-2's initialization: weights N(0, 0.02), the projections that feed the
  // residual stream N(0, 0.02/sqrt(2·num_layers)), biases 0, layernorm gains 1.
  // Deterministic in `seed` on every platform.
  void InitializeWeights(uint64_t seed);

  // Runs the model on `batch_size` rows of `sequence_length` tokens
  // (row-major) and returns the mean cross-entropy over all positions whose
  // target is >= 0 (a negative target, e.g. padding, is skipped). Keeps the
  // activations for Backward. sequence_length <= max_sequence_length; every
  // token and target < vocab_size (checked; throws std::invalid_argument).
  float Forward(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                int64_t batch_size, int64_t sequence_length);

  // Adds d(loss_scale × last Forward's loss)/d(parameters) into gradients().
  // loss_scale < 1 averages over gradient-accumulation micro-steps.
  void Backward(float loss_scale = 1.0f);

  void ZeroGradients();

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

 private:
  struct Offsets;  // where each tensor kind starts in the flat buffer
  struct Buffers;  // activations of the last Forward and backward scratch

  ModelConfig config_;
  std::vector<ParameterTensor> tensors_;
  std::vector<float> parameters_;
  std::vector<float> gradients_;
  std::unique_ptr<Offsets> offsets_;
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace infini::examples::gpt2
