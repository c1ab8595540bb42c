#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

namespace infini::examples::gpt2 {
namespace {

// Tensor kinds in the order they sit in the flat buffer. Per-layer kinds hold
// all layers back to back (layer l at start + l × per_layer).
enum Kind {
  kTokenEmbedding,     // V × C (also the LM head: tied)
  kPositionEmbedding,  // T × C
  kLn1Weight,          // L × C
  kLn1Bias,            // L × C
  kQkvWeight,          // L × 3C × C
  kQkvBias,            // L × 3C
  kAttnProjWeight,     // L × C × C
  kAttnProjBias,       // L × C
  kLn2Weight,          // L × C
  kLn2Bias,            // L × C
  kFcWeight,           // L × 4C × C
  kFcBias,             // L × 4C
  kFcProjWeight,       // L × C × 4C
  kFcProjBias,         // L × C
  kLnfWeight,          // C
  kLnfBias,            // C
  kNumKinds
};

constexpr const char* kKindNames[kNumKinds] = {
    "token_embedding", "position_embedding", "ln1.weight",       "ln1.bias",
    "attn.qkv.weight", "attn.qkv.bias",      "attn.proj.weight", "attn.proj.bias",
    "ln2.weight",      "ln2.bias",           "mlp.fc.weight",    "mlp.fc.bias",
    "mlp.proj.weight", "mlp.proj.bias",      "ln_f.weight",      "ln_f.bias"};

constexpr float kLayerNormEpsilon = 1e-5f;

// ---- Building blocks. Backward functions ADD into their gradient outputs. ----

void EmbeddingForward(float* out, const int32_t* tokens, const float* token_embedding,
                      const float* position_embedding, int64_t rows, int64_t sequence_length,
                      int64_t channels) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* token = token_embedding + tokens[row] * channels;
    const float* position = position_embedding + (row % sequence_length) * channels;
    float* destination = out + row * channels;
    for (int64_t c = 0; c < channels; ++c) destination[c] = token[c] + position[c];
  }
}

void EmbeddingBackward(float* d_token_embedding, float* d_position_embedding, const float* d_out,
                       const int32_t* tokens, int64_t rows, int64_t sequence_length,
                       int64_t channels) {
  for (int64_t row = 0; row < rows; ++row) {
    float* d_token = d_token_embedding + tokens[row] * channels;
    float* d_position = d_position_embedding + (row % sequence_length) * channels;
    const float* gradient = d_out + row * channels;
    for (int64_t c = 0; c < channels; ++c) {
      d_token[c] += gradient[c];
      d_position[c] += gradient[c];
    }
  }
}

void LayerNormForward(float* out, float* mean_out, float* rstd_out, const float* in,
                      const float* weight, const float* bias, int64_t rows, int64_t channels) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* x = in + row * channels;
    float mean = 0.0f;
    for (int64_t c = 0; c < channels; ++c) mean += x[c];
    mean /= static_cast<float>(channels);
    float variance = 0.0f;
    for (int64_t c = 0; c < channels; ++c) variance += (x[c] - mean) * (x[c] - mean);
    variance /= static_cast<float>(channels);
    const float rstd = 1.0f / std::sqrt(variance + kLayerNormEpsilon);
    float* y = out + row * channels;
    for (int64_t c = 0; c < channels; ++c) y[c] = (x[c] - mean) * rstd * weight[c] + bias[c];
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

void LayerNormBackward(float* d_in, float* d_weight, float* d_bias, const float* d_out,
                       const float* in, const float* weight, const float* mean, const float* rstd,
                       int64_t rows, int64_t channels) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* dy = d_out + row * channels;
    const float* x = in + row * channels;
    float* dx = d_in + row * channels;
    // With n = normalized x and g = dy · weight:
    // dx = rstd · (g − mean(g) − n · mean(g · n)).
    float mean_g = 0.0f;
    float mean_gn = 0.0f;
    for (int64_t c = 0; c < channels; ++c) {
      const float normalized = (x[c] - mean[row]) * rstd[row];
      const float g = dy[c] * weight[c];
      mean_g += g;
      mean_gn += g * normalized;
    }
    mean_g /= static_cast<float>(channels);
    mean_gn /= static_cast<float>(channels);
    for (int64_t c = 0; c < channels; ++c) {
      const float normalized = (x[c] - mean[row]) * rstd[row];
      d_bias[c] += dy[c];
      d_weight[c] += normalized * dy[c];
      dx[c] += rstd[row] * (dy[c] * weight[c] - mean_g - normalized * mean_gn);
    }
  }
}

float Dot(const float* a, const float* b, int64_t count) {
  // Four partial sums: independent chains the CPU can overlap.
  float sum0 = 0.0f, sum1 = 0.0f, sum2 = 0.0f, sum3 = 0.0f;
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    sum0 += a[i] * b[i];
    sum1 += a[i + 1] * b[i + 1];
    sum2 += a[i + 2] * b[i + 2];
    sum3 += a[i + 3] * b[i + 3];
  }
  for (; i < count; ++i) sum0 += a[i] * b[i];
  return (sum0 + sum1) + (sum2 + sum3);
}

// out[rows × out_channels] = in[rows × in_channels] · weightᵀ + bias, with
// weight stored [out_channels × in_channels] (as torch.nn.Linear), so every
// output is a dot product of two contiguous rows. bias may be null.
void MatmulForward(float* out, const float* in, const float* weight, const float* bias,
                   int64_t rows, int64_t in_channels, int64_t out_channels) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* x = in + row * in_channels;
    float* y = out + row * out_channels;
    for (int64_t o = 0; o < out_channels; ++o) {
      y[o] = (bias ? bias[o] : 0.0f) + Dot(x, weight + o * in_channels, in_channels);
    }
  }
}

// The inner loops are axpy's over contiguous rows, which compilers vectorize.
void MatmulBackward(float* d_in, float* d_weight, float* d_bias, const float* d_out,
                    const float* in, const float* weight, int64_t rows, int64_t in_channels,
                    int64_t out_channels) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* dy = d_out + row * out_channels;
    float* dx = d_in + row * in_channels;
    for (int64_t o = 0; o < out_channels; ++o) {
      const float scale = dy[o];
      const float* w = weight + o * in_channels;
      for (int64_t i = 0; i < in_channels; ++i) dx[i] += scale * w[i];
    }
  }
  for (int64_t o = 0; o < out_channels; ++o) {
    float* dw = d_weight + o * in_channels;
    float bias_sum = 0.0f;
    for (int64_t row = 0; row < rows; ++row) {
      const float scale = d_out[row * out_channels + o];
      bias_sum += scale;
      const float* x = in + row * in_channels;
      for (int64_t i = 0; i < in_channels; ++i) dw[i] += scale * x[i];
    }
    if (d_bias) d_bias[o] += bias_sum;
  }
}

// Causal multi-head self-attention. qkv is [B, T, 3C] (q, k, v, each C wide
// with heads of C/NH channels); probabilities are kept as [B, NH, T, T] (only
// t2 <= t is meaningful); out is [B, T, C].
void AttentionForward(float* out, float* probabilities, const float* qkv, int64_t batch_size,
                      int64_t sequence_length, int64_t channels, int64_t num_heads) {
  const int64_t head_size = channels / num_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_size));
  const int64_t T = sequence_length;
  for (int64_t b = 0; b < batch_size; ++b) {
    for (int64_t h = 0; h < num_heads; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const float* query = qkv + (b * T + t) * 3 * channels + h * head_size;
        float* p = probabilities + ((b * num_heads + h) * T + t) * T;
        float max_score = -INFINITY;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float* key = qkv + (b * T + t2) * 3 * channels + channels + h * head_size;
          p[t2] = Dot(query, key, head_size) * scale;
          max_score = std::max(max_score, p[t2]);
        }
        float sum = 0.0f;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          p[t2] = std::exp(p[t2] - max_score);
          sum += p[t2];
        }
        for (int64_t t2 = 0; t2 <= t; ++t2) p[t2] /= sum;
        for (int64_t t2 = t + 1; t2 < T; ++t2) p[t2] = 0.0f;

        float* y = out + (b * T + t) * channels + h * head_size;
        std::fill(y, y + head_size, 0.0f);
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float* value = qkv + (b * T + t2) * 3 * channels + 2 * channels + h * head_size;
          for (int64_t i = 0; i < head_size; ++i) y[i] += p[t2] * value[i];
        }
      }
    }
  }
}

// `score_gradient` is scratch of sequence_length floats.
void AttentionBackward(float* d_qkv, float* score_gradient, const float* d_out, const float* qkv,
                       const float* probabilities, int64_t batch_size, int64_t sequence_length,
                       int64_t channels, int64_t num_heads) {
  const int64_t head_size = channels / num_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_size));
  const int64_t T = sequence_length;
  for (int64_t b = 0; b < batch_size; ++b) {
    for (int64_t h = 0; h < num_heads; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const float* p = probabilities + ((b * num_heads + h) * T + t) * T;
        const float* dy = d_out + (b * T + t) * channels + h * head_size;
        const int64_t row_offset = (b * T + t) * 3 * channels + h * head_size;
        // y = Σ p·v: gradients of p and v.
        float weighted_sum = 0.0f;  // Σ p · dp, for the softmax backward
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const int64_t value_offset = (b * T + t2) * 3 * channels + 2 * channels + h * head_size;
          score_gradient[t2] = Dot(dy, qkv + value_offset, head_size);
          weighted_sum += p[t2] * score_gradient[t2];
          float* d_value = d_qkv + value_offset;
          for (int64_t i = 0; i < head_size; ++i) d_value[i] += p[t2] * dy[i];
        }
        // Softmax backward, then score = scale · q·k.
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float d_score = p[t2] * (score_gradient[t2] - weighted_sum) * scale;
          const int64_t key_offset = (b * T + t2) * 3 * channels + channels + h * head_size;
          const float* query = qkv + row_offset;
          const float* key = qkv + key_offset;
          float* d_query = d_qkv + row_offset;
          float* d_key = d_qkv + key_offset;
          for (int64_t i = 0; i < head_size; ++i) {
            d_query[i] += d_score * key[i];
            d_key[i] += d_score * query[i];
          }
        }
      }
    }
  }
}

// GELU, tanh approximation (as GPT-2).
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluCubic = 0.044715f;

void GeluForward(float* out, const float* in, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float x = in[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + kGeluCubic * x * x * x)));
  }
}

void GeluBackward(float* d_in, const float* in, const float* d_out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float x = in[i];
    const float inner = kGeluScale * (x + kGeluCubic * x * x * x);
    const float tanh_inner = std::tanh(inner);
    const float sech2 = 1.0f - tanh_inner * tanh_inner;
    const float derivative = 0.5f * (1.0f + tanh_inner) +
                             0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    d_in[i] += derivative * d_out[i];
  }
}

void Add(float* out, const float* a, const float* b, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

// Standard normal draws from a 64-bit Mersenne Twister through Box-Muller,
// written out so every platform's standard library gives the same weights.
class NormalSource {
 public:
  explicit NormalSource(uint64_t seed) : engine_(seed) {}
  float Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // Uniform in (0, 1]: 53 random bits, shifted away from zero.
    const double u1 = (static_cast<double>(engine_() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * M_PI * u2;
    spare_ = static_cast<float>(radius * std::sin(angle));
    has_spare_ = true;
    return static_cast<float>(radius * std::cos(angle));
  }

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  float spare_ = 0.0f;
};

}  // namespace

struct Model::Offsets {
  int64_t start[kNumKinds] = {};
  int64_t per_layer[kNumKinds] = {};  // 0 for tensors outside the blocks
};

struct Model::Buffers {
  int64_t batch_size = 0;
  int64_t sequence_length = 0;
  int64_t counted_targets = 0;
  std::vector<int32_t> inputs, targets;

  // Forward activations; per-layer ones hold all layers back to back.
  std::vector<float> embedded;                  // B·T·C
  std::vector<float> ln1, ln1_mean, ln1_rstd;   // L·B·T·C, L·B·T
  std::vector<float> qkv;                       // L·B·T·3C
  std::vector<float> attention_out;             // L·B·T·C
  std::vector<float> attention_probabilities;   // L·B·NH·T·T
  std::vector<float> residual_after_attention;  // L·B·T·C
  std::vector<float> ln2, ln2_mean, ln2_rstd;   // L·B·T·C, L·B·T
  std::vector<float> fc, fc_gelu;               // L·B·T·4C
  std::vector<float> residual_after_mlp;        // L·B·T·C
  std::vector<float> lnf, lnf_mean, lnf_rstd;   // B·T·C, B·T
  std::vector<float> probabilities;             // B·T·V
  std::vector<float> projection;                // B·T·C scratch

  // Backward scratch, one layer at a time.
  std::vector<float> d_residual;  // gradient flowing down the residual stream
  std::vector<float> d_ln, d_qkv, d_attention_out, d_fc, d_fc_gelu, d_logits, d_scores;
};

std::string ValidateModelConfig(const ModelConfig& config) {
  auto bad = [](const char* flag, int64_t value, const std::string& expected) {
    return "--" + std::string(flag) + "=" + std::to_string(value) + ": expected " + expected;
  };
  if (config.vocab_size < 1 || config.vocab_size > 65536) {
    return bad("vocab_size", config.vocab_size, "a vocabulary in [1, 65536]");
  }
  if (config.max_sequence_length < 1 || config.max_sequence_length > 8192) {
    return bad("sequence_length", config.max_sequence_length, "a length in [1, 8192]");
  }
  if (config.num_layers < 1 || config.num_layers > 256) {
    return bad("num_layers", config.num_layers, "a count in [1, 256]");
  }
  if (config.channels < 1 || config.channels > 16384) {
    return bad("channels", config.channels, "a width in [1, 16384]");
  }
  if (config.num_heads < 1 || config.channels % config.num_heads != 0) {
    return bad("num_heads", config.num_heads,
               "a positive divisor of --channels=" + std::to_string(config.channels));
  }
  return {};
}

Model::Model(const ModelConfig& config)
    : config_(config),
      offsets_(std::make_unique<Offsets>()),
      buffers_(std::make_unique<Buffers>()) {
  if (std::string problem = ValidateModelConfig(config); !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  const int64_t V = config.vocab_size, T = config.max_sequence_length;
  const int64_t L = config.num_layers, C = config.channels;
  const int64_t layer_counts[kNumKinds] = {
      V * C, T * C, C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C, C, C};
  const bool in_layers[kNumKinds] = {false, false, true, true, true, true, true,  true,
                                     true,  true,  true, true, true, true, false, false};
  const bool decays[kNumKinds] = {true,  true,  false, false, true, false, true,  false,
                                  false, false, true,  false, true, false, false, false};
  int64_t offset = 0;
  for (int kind = 0; kind < kNumKinds; ++kind) {
    const int64_t count = layer_counts[kind] * (in_layers[kind] ? L : 1);
    offsets_->start[kind] = offset;
    offsets_->per_layer[kind] = in_layers[kind] ? layer_counts[kind] : 0;
    tensors_.push_back({kKindNames[kind], offset, count, decays[kind]});
    offset += count;
  }
  parameters_.assign(offset, 0.0f);
  gradients_.assign(offset, 0.0f);
}

Model::~Model() = default;

void Model::InitializeWeights(uint64_t seed) {
  NormalSource normal(seed);
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(config_.num_layers));
  for (int kind = 0; kind < kNumKinds; ++kind) {
    float* data = parameters_.data() + tensors_[kind].offset;
    const int64_t count = tensors_[kind].count;
    switch (kind) {
      case kLn1Weight:
      case kLn2Weight:
      case kLnfWeight:
        std::fill(data, data + count, 1.0f);
        break;
      case kTokenEmbedding:
      case kPositionEmbedding:
      case kQkvWeight:
      case kFcWeight:
        for (int64_t i = 0; i < count; ++i) data[i] = 0.02f * normal.Next();
        break;
      case kAttnProjWeight:
      case kFcProjWeight:
        for (int64_t i = 0; i < count; ++i) data[i] = residual_std * normal.Next();
        break;
      default:  // biases
        std::fill(data, data + count, 0.0f);
    }
  }
}

void Model::ZeroGradients() { std::fill(gradients_.begin(), gradients_.end(), 0.0f); }

float Model::Forward(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                     int64_t batch_size, int64_t sequence_length) {
  const int64_t B = batch_size, T = sequence_length;
  const int64_t C = config_.channels, L = config_.num_layers, V = config_.vocab_size;
  const int64_t NH = config_.num_heads;
  if (B < 1 || T < 1 || T > config_.max_sequence_length) {
    throw std::invalid_argument(
        "Forward: batch " + std::to_string(B) + " × sequence " + std::to_string(T) +
        ", expected sequence <= " + std::to_string(config_.max_sequence_length));
  }
  if (static_cast<int64_t>(inputs.size()) != B * T ||
      static_cast<int64_t>(targets.size()) != B * T) {
    throw std::invalid_argument("Forward: inputs and targets must hold batch × sequence = " +
                                std::to_string(B * T) + " tokens");
  }
  for (int64_t i = 0; i < B * T; ++i) {
    if (inputs[i] < 0 || inputs[i] >= V || targets[i] >= V) {
      throw std::invalid_argument("Forward: token " + std::to_string(inputs[i]) + " or target " +
                                  std::to_string(targets[i]) + " at position " + std::to_string(i) +
                                  " outside the vocabulary of " + std::to_string(V));
    }
  }

  Buffers& a = *buffers_;
  if (a.batch_size != B || a.sequence_length != T) {
    const int64_t rows = B * T;
    a.batch_size = B;
    a.sequence_length = T;
    a.embedded.assign(rows * C, 0.0f);
    for (auto* buffer :
         {&a.ln1, &a.attention_out, &a.residual_after_attention, &a.ln2, &a.residual_after_mlp}) {
      buffer->assign(L * rows * C, 0.0f);
    }
    for (auto* buffer : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd}) {
      buffer->assign(L * rows, 0.0f);
    }
    a.qkv.assign(L * rows * 3 * C, 0.0f);
    a.attention_probabilities.assign(L * B * NH * T * T, 0.0f);
    a.fc.assign(L * rows * 4 * C, 0.0f);
    a.fc_gelu.assign(L * rows * 4 * C, 0.0f);
    a.lnf.assign(rows * C, 0.0f);
    a.lnf_mean.assign(rows, 0.0f);
    a.lnf_rstd.assign(rows, 0.0f);
    a.probabilities.assign(rows * V, 0.0f);
    a.projection.assign(rows * C, 0.0f);
    a.d_residual.assign(rows * C, 0.0f);
    a.d_ln.assign(rows * C, 0.0f);
    a.d_qkv.assign(rows * 3 * C, 0.0f);
    a.d_attention_out.assign(rows * C, 0.0f);
    a.d_fc.assign(rows * 4 * C, 0.0f);
    a.d_fc_gelu.assign(rows * 4 * C, 0.0f);
    a.d_logits.assign(rows * V, 0.0f);
    a.d_scores.assign(T, 0.0f);
  }
  a.inputs.assign(inputs.begin(), inputs.end());
  a.targets.assign(targets.begin(), targets.end());

  const int64_t rows = B * T;
  auto param = [&](int kind, int64_t layer) {
    return parameters_.data() + offsets_->start[kind] + layer * offsets_->per_layer[kind];
  };

  EmbeddingForward(a.embedded.data(), a.inputs.data(), param(kTokenEmbedding, 0),
                   param(kPositionEmbedding, 0), rows, T, C);
  const float* residual = a.embedded.data();
  for (int64_t l = 0; l < L; ++l) {
    float* ln1 = a.ln1.data() + l * rows * C;
    float* qkv = a.qkv.data() + l * rows * 3 * C;
    float* attention_out = a.attention_out.data() + l * rows * C;
    float* probabilities = a.attention_probabilities.data() + l * B * NH * T * T;
    float* residual2 = a.residual_after_attention.data() + l * rows * C;
    float* ln2 = a.ln2.data() + l * rows * C;
    float* fc = a.fc.data() + l * rows * 4 * C;
    float* fc_gelu = a.fc_gelu.data() + l * rows * 4 * C;
    float* residual3 = a.residual_after_mlp.data() + l * rows * C;

    LayerNormForward(ln1, a.ln1_mean.data() + l * rows, a.ln1_rstd.data() + l * rows, residual,
                     param(kLn1Weight, l), param(kLn1Bias, l), rows, C);
    MatmulForward(qkv, ln1, param(kQkvWeight, l), param(kQkvBias, l), rows, C, 3 * C);
    AttentionForward(attention_out, probabilities, qkv, B, T, C, NH);
    MatmulForward(a.projection.data(), attention_out, param(kAttnProjWeight, l),
                  param(kAttnProjBias, l), rows, C, C);
    Add(residual2, residual, a.projection.data(), rows * C);
    LayerNormForward(ln2, a.ln2_mean.data() + l * rows, a.ln2_rstd.data() + l * rows, residual2,
                     param(kLn2Weight, l), param(kLn2Bias, l), rows, C);
    MatmulForward(fc, ln2, param(kFcWeight, l), param(kFcBias, l), rows, C, 4 * C);
    GeluForward(fc_gelu, fc, rows * 4 * C);
    MatmulForward(a.projection.data(), fc_gelu, param(kFcProjWeight, l), param(kFcProjBias, l),
                  rows, 4 * C, C);
    Add(residual3, residual2, a.projection.data(), rows * C);
    residual = residual3;
  }
  LayerNormForward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), residual,
                   param(kLnfWeight, 0), param(kLnfBias, 0), rows, C);
  MatmulForward(a.probabilities.data(), a.lnf.data(), param(kTokenEmbedding, 0), nullptr, rows, C,
                V);

  // Softmax in place, then cross-entropy on the counted positions.
  double loss_sum = 0.0;
  a.counted_targets = 0;
  for (int64_t row = 0; row < rows; ++row) {
    float* p = a.probabilities.data() + row * V;
    const float max_logit = *std::max_element(p, p + V);
    float sum = 0.0f;
    for (int64_t v = 0; v < V; ++v) {
      p[v] = std::exp(p[v] - max_logit);
      sum += p[v];
    }
    for (int64_t v = 0; v < V; ++v) p[v] /= sum;
    if (a.targets[row] >= 0) {
      loss_sum -= std::log(std::max(p[a.targets[row]], 1e-30f));
      ++a.counted_targets;
    }
  }
  return a.counted_targets == 0
             ? 0.0f
             : static_cast<float>(loss_sum / static_cast<double>(a.counted_targets));
}

void Model::Backward(float loss_scale) {
  Buffers& a = *buffers_;
  if (a.batch_size == 0) throw std::logic_error("Backward called before Forward");
  const int64_t B = a.batch_size, T = a.sequence_length;
  const int64_t C = config_.channels, L = config_.num_layers, V = config_.vocab_size;
  const int64_t NH = config_.num_heads;
  const int64_t rows = B * T;
  auto param = [&](int kind, int64_t layer) {
    return parameters_.data() + offsets_->start[kind] + layer * offsets_->per_layer[kind];
  };
  auto grad = [&](int kind, int64_t layer) {
    return gradients_.data() + offsets_->start[kind] + layer * offsets_->per_layer[kind];
  };
  auto zero = [](std::vector<float>& buffer) { std::fill(buffer.begin(), buffer.end(), 0.0f); };

  // d(mean loss)/d(logits) = (p − onehot(target)) / counted.
  const float scale =
      a.counted_targets == 0 ? 0.0f : loss_scale / static_cast<float>(a.counted_targets);
  for (int64_t row = 0; row < rows; ++row) {
    const float* p = a.probabilities.data() + row * V;
    float* d = a.d_logits.data() + row * V;
    if (a.targets[row] < 0) {
      std::fill(d, d + V, 0.0f);
      continue;
    }
    for (int64_t v = 0; v < V; ++v) d[v] = p[v] * scale;
    d[a.targets[row]] -= scale;
  }

  zero(a.d_ln);
  MatmulBackward(a.d_ln.data(), grad(kTokenEmbedding, 0), nullptr, a.d_logits.data(), a.lnf.data(),
                 param(kTokenEmbedding, 0), rows, C, V);
  const float* last_residual = a.residual_after_mlp.data() + (L - 1) * rows * C;
  zero(a.d_residual);
  LayerNormBackward(a.d_residual.data(), grad(kLnfWeight, 0), grad(kLnfBias, 0), a.d_ln.data(),
                    last_residual, param(kLnfWeight, 0), a.lnf_mean.data(), a.lnf_rstd.data(), rows,
                    C);

  // d_residual holds the gradient of the current layer's output; each
  // sub-block adds its branch's contribution, leaving the gradient of the
  // layer's input.
  for (int64_t l = L - 1; l >= 0; --l) {
    const float* residual =
        l == 0 ? a.embedded.data() : a.residual_after_mlp.data() + (l - 1) * rows * C;
    const float* ln1 = a.ln1.data() + l * rows * C;
    const float* qkv = a.qkv.data() + l * rows * 3 * C;
    const float* attention_out = a.attention_out.data() + l * rows * C;
    const float* probabilities = a.attention_probabilities.data() + l * B * NH * T * T;
    const float* residual2 = a.residual_after_attention.data() + l * rows * C;
    const float* ln2 = a.ln2.data() + l * rows * C;
    const float* fc = a.fc.data() + l * rows * 4 * C;
    const float* fc_gelu = a.fc_gelu.data() + l * rows * 4 * C;

    // MLP branch: residual3 = residual2 + proj(gelu(fc(ln2(residual2)))).
    zero(a.d_fc_gelu);
    MatmulBackward(a.d_fc_gelu.data(), grad(kFcProjWeight, l), grad(kFcProjBias, l),
                   a.d_residual.data(), fc_gelu, param(kFcProjWeight, l), rows, 4 * C, C);
    zero(a.d_fc);
    GeluBackward(a.d_fc.data(), fc, a.d_fc_gelu.data(), rows * 4 * C);
    zero(a.d_ln);
    MatmulBackward(a.d_ln.data(), grad(kFcWeight, l), grad(kFcBias, l), a.d_fc.data(), ln2,
                   param(kFcWeight, l), rows, C, 4 * C);
    LayerNormBackward(a.d_residual.data(), grad(kLn2Weight, l), grad(kLn2Bias, l), a.d_ln.data(),
                      residual2, param(kLn2Weight, l), a.ln2_mean.data() + l * rows,
                      a.ln2_rstd.data() + l * rows, rows, C);

    // Attention branch: residual2 = residual + proj(attention(qkv(ln1(residual)))).
    zero(a.d_attention_out);
    MatmulBackward(a.d_attention_out.data(), grad(kAttnProjWeight, l), grad(kAttnProjBias, l),
                   a.d_residual.data(), attention_out, param(kAttnProjWeight, l), rows, C, C);
    zero(a.d_qkv);
    AttentionBackward(a.d_qkv.data(), a.d_scores.data(), a.d_attention_out.data(), qkv,
                      probabilities, B, T, C, NH);
    zero(a.d_ln);
    MatmulBackward(a.d_ln.data(), grad(kQkvWeight, l), grad(kQkvBias, l), a.d_qkv.data(), ln1,
                   param(kQkvWeight, l), rows, C, 3 * C);
    LayerNormBackward(a.d_residual.data(), grad(kLn1Weight, l), grad(kLn1Bias, l), a.d_ln.data(),
                      residual, param(kLn1Weight, l), a.ln1_mean.data() + l * rows,
                      a.ln1_rstd.data() + l * rows, rows, C);
  }
  EmbeddingBackward(grad(kTokenEmbedding, 0), grad(kPositionEmbedding, 0), a.d_residual.data(),
                    a.inputs.data(), rows, T, C);
}

}  // namespace infini::examples::gpt2
