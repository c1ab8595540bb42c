// Training on an accelerator, as the trainer sees it: the model, its
// optimizer state and the gradient communication live on the rank's device;
// the host hands in tokens and reads back losses. Implemented for CUDA in
// cuda/ (built only when CUDA is found); the trainer itself stays free of
// vendor headers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "adamw.h"
#include "data_parallel.h"
#include "model.h"
#include "options.h"

namespace infini::examples::gpt2 {

struct DeviceTrainingOptions {
  ModelConfig model;
  TrainDtype dtype = TrainDtype::kFloat32;
  int64_t max_batch_size = 1;
  GradientSync gradient_sync = GradientSync::kOverlap;
  size_t bucket_bytes = size_t{25} << 20;
  bool register_buckets = true;  // GradientReducerOptions::register_buckets
  AdamWOptions adamw;
  float grad_clip = 1.0f;  // 0: off
};

class DeviceTraining {
 public:
  virtual ~DeviceTraining() = default;

  virtual int64_t num_parameters() const = 0;
  // "cuda:0, bfloat16, gradients overlap backward in 7 buckets".
  virtual std::string description() const = 0;

  // Forward and backward of one micro-batch (host tokens), enqueued; its
  // mean loss × loss_weight joins the step's loss and its gradient ×
  // loss_weight joins the step's gradients. The last micro-step of a step
  // communicates the gradients (per GradientSync).
  virtual void MicroStep(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                         int64_t batch_size, int64_t sequence_length, float loss_weight,
                         bool last_micro_step) = 0;
  // AdamW on the averaged, clipped gradients (step_number from 1); then the
  // gradients start from zero.
  virtual void OptimizerStep(int64_t step_number) = 0;
  // Wait for the device: this rank's loss of the step, the global gradient
  // norm before clipping.
  virtual float ReadLoss() = 0;
  virtual float ReadGradientNorm() = 0;
  // A checkpoint's state: the weights into `model` and AdamW's moments into
  // `optimizer` (host layouts), after the device's work so far.
  virtual void StoreState(Model& model, AdamW& optimizer) = 0;
  // The other way: a resumed run's weights and moments onto the device.
  virtual void LoadState(const Model& model, AdamW& optimizer) = 0;
  // The group's world changed (a loss): gradient communication (buckets,
  // registrations, the gradient scale) made again for it, the gradients
  // zeroed, the weights and moments kept where they are. false when
  // micro-batches of `max_batch_size` outgrow the device's buffers: then
  // make a new DeviceTraining instead.
  virtual bool Regroup(int64_t max_batch_size) = 0;
  // Mean loss of one micro-batch, no gradients.
  virtual float Evaluate(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                         int64_t batch_size, int64_t sequence_length) = 0;
};

// Whether this build can train on CUDA devices.
bool DeviceTrainingAvailable();

// Starts from `weights` (the host model, already identical on every rank).
// `group` must be on a CUDA device. Throws std::runtime_error with one line
// (e.g. out of device memory).
std::unique_ptr<DeviceTraining> CreateDeviceTraining(const DeviceTrainingOptions& options,
                                                     const Model& weights,
                                                     DataParallelGroup& group);

}  // namespace infini::examples::gpt2
