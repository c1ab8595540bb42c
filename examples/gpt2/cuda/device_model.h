// GPT-2 on a CUDA device: the host Model's architecture and configuration
// (model.h), with cuBLAS and cuBLASLt (fused_matmul.h) for the matrix
// products, the fused attention of attention.h for heads of 64, and the
// kernels of kernels.h for the rest, in float32 or bfloat16 (float
// accumulation, float master weights and gradients).
//
// Parameters sit in "gradient groups" in the order backward finishes them:
// ln_f, layer L−1, …, layer 0, then the embeddings (the token embedding is
// also the LM head, so its gradient is final only at the very end). A data-
// parallel trainer lends the model one gradient buffer per group (views of a
// GradientReducer) and hears from Backward as each group becomes final.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "adamw.h"  // AdamWOptions
#include "model.h"

namespace infini::examples::gpt2::gpu {

enum class DeviceDtype { kFloat32, kBFloat16 };

struct GradientGroup {
  std::string name;    // "ln_f", "layer11", ..., "embeddings"
  int64_t offset = 0;  // in the flat parameter layout of this model
  int64_t count = 0;
};

class DeviceModel {
 public:
  // Allocates parameters for `config` on the current device; its vocabulary
  // is padded to a multiple of 128 rows (50257 → 50304) that the loss never
  // sees. Work goes to `stream` (not owned). Throws std::runtime_error with
  // one line when the device runs out of memory.
  DeviceModel(const ModelConfig& config, DeviceDtype dtype, int64_t max_batch_size,
              cudaStream_t stream);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  const ModelConfig& config() const;
  int64_t padded_vocab_size() const;
  int64_t num_parameters() const;
  const std::vector<GradientGroup>& gradient_groups() const;
  cudaStream_t stream() const;

  // Copies the host model's weights (same config) in: the way a run starts
  // from the host model's seeded initialization.
  void LoadWeights(const Model& host);

  // Gradient group `group` lives at `data` (count floats, device memory)
  // from now on; by default the model owns its gradients.
  void SetGradientStorage(size_t group, float* data);
  // Every group back on the model's own gradients (before the storage set
  // above is freed).
  void UseOwnGradientStorage();
  float* gradient_storage(size_t group) const;
  void ZeroGradients();

  // Enqueues the forward pass on B × T host tokens (checked against the
  // vocabulary: std::invalid_argument). Adds the micro-batch's mean loss,
  // times `loss_weight`, to the loss accumulator (ReadLoss).
  void Forward(std::span<const int32_t> inputs, std::span<const int32_t> targets,
               int64_t batch_size, int64_t sequence_length, float loss_weight = 1.0f);
  // Enqueues the backward pass of the last Forward, adding
  // d(loss_scale × loss)/d(parameters) into the gradients; calls
  // `group_ready(g)` once group g's gradient is final, with its work enqueued.
  void Backward(float loss_scale, const std::function<void(size_t)>& group_ready = {});

  // Enqueues one AdamW step (step_number from 1) with the gradients scaled by
  // `gradient_scale` and clipped to a global norm of `max_norm` (0: off).
  void Step(const AdamWOptions& options, int64_t step_number, float gradient_scale, float max_norm);

  // Waits for the stream; returns and clears the loss accumulator.
  float ReadLoss();
  // Waits for the stream; the global gradient norm of the last Step (after
  // gradient_scale, before clipping).
  float ReadGradientNorm();
  // Waits for the stream; the weights in the host model's layout.
  void StoreWeights(Model& host) const;

  // AdamW's two moments, in the host model's parameter layout (a checkpoint's
  // optimizer state): copied out after waiting for the stream, or in.
  void StoreMoments(const Model& layout, std::span<float> first_moment,
                    std::span<float> second_moment) const;
  void LoadMoments(const Model& layout, std::span<const float> first_moment,
                   std::span<const float> second_moment);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace infini::examples::gpt2::gpu
