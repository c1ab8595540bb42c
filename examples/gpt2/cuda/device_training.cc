// DeviceTraining on CUDA: DeviceModel on the rank's device and stream, with
// its gradients in a GradientReducer's buckets (--overlap, the default), in
// its own buffer all-reduced after backward (--overlap=false), or not
// communicated (--no_grad_sync).
#include "device_training.h"

#include <cuda_runtime.h>

#include <stdexcept>

#include "device_model.h"
#include "infini/ccl/ccl.h"
#include "infini/parallel/context.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/gradient_reducer.h"
#include "infini/parallel/process_group.h"

namespace infini::examples::gpt2 {
namespace {

void Check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
  }
}

// A non-blocking stream of our own (the legacy default stream would
// serialize with the communication stream), destroyed last.
class OwnedStream {
 public:
  OwnedStream() { Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); }
  ~OwnedStream() { cudaStreamDestroy(stream_); }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class CudaTraining : public DeviceTraining {
 public:
  CudaTraining(const DeviceTrainingOptions& options, const Model& weights, DataParallelGroup& group)
      : options_(options), group_(group) {
    const std::shared_ptr<parallel::Context> context = group.context();
    if (!context || group.process_group() == nullptr) {
      throw std::logic_error("CudaTraining needs a group with a backend");
    }
    device_index_ = context->device_index();
    Check(cudaSetDevice(device_index_), "set device");
    owned_stream_ = std::make_unique<OwnedStream>();
    compute_ = ccl::Stream::Wrap(context->backend(),
                                 reinterpret_cast<infiniCclStream_t>(owned_stream_->get()));
    model_ = std::make_unique<gpu::DeviceModel>(options.model,
                                                options.dtype == TrainDtype::kBFloat16
                                                    ? gpu::DeviceDtype::kBFloat16
                                                    : gpu::DeviceDtype::kFloat32,
                                                options.max_batch_size, owned_stream_->get());
    model_->LoadWeights(weights);
    SetUpGradientSync();
    model_->ZeroGradients();
  }

  ~CudaTraining() override {
    // Outstanding work (a bucket's all_reduce) finishes before the buffers go.
    if (owned_stream_) cudaStreamSynchronize(owned_stream_->get());
  }

  bool Regroup(int64_t max_batch_size) override {
    if (max_batch_size > options_.max_batch_size) return false;
    // The old buckets may still be read by work enqueued before the loss.
    cudaStreamSynchronize(owned_stream_->get());
    model_->UseOwnGradientStorage();
    reducer_.reset();
    SetUpGradientSync();
    model_->ZeroGradients();
    return true;
  }

  int64_t num_parameters() const override { return model_->num_parameters(); }

  std::string description() const override {
    std::string text = "cuda:" + std::to_string(device_index_) + ", " + DtypeName(options_.dtype) +
                       ", vocabulary padded to " + std::to_string(model_->padded_vocab_size()) +
                       ", gradients ";
    switch (sync_) {
      case GradientSync::kOverlap:
        return text + "all-reduced during backward in " + std::to_string(reducer_->num_buckets()) +
               " buckets";
      case GradientSync::kAfterBackward:
        return text + "all-reduced after backward";
      case GradientSync::kNone:
        return text + (group_.world_size() == 1 ? "local" : "not communicated");
    }
    return text;
  }

  void MicroStep(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                 int64_t batch_size, int64_t sequence_length, float loss_weight,
                 bool last_micro_step) override {
    Communicating([&] {
      MicroStepOnDevice(inputs, targets, batch_size, sequence_length, loss_weight, last_micro_step);
    });
  }

  void OptimizerStep(int64_t step_number) override {
    Communicating([&] {
      if (sync_ == GradientSync::kOverlap) reducer_->WaitAll(compute_);
    });
    model_->Step(options_.adamw, step_number, gradient_scale_, options_.grad_clip);
    model_->ZeroGradients();
  }

  float ReadLoss() override { return model_->ReadLoss(); }
  float ReadGradientNorm() override { return model_->ReadGradientNorm(); }

  void StoreState(Model& model, AdamW& optimizer) override {
    model_->StoreWeights(model);
    model_->StoreMoments(model, optimizer.first_moment(), optimizer.second_moment());
  }

  void LoadState(const Model& model, AdamW& optimizer) override {
    model_->LoadWeights(model);
    model_->LoadMoments(model, optimizer.first_moment(), optimizer.second_moment());
  }

  float Evaluate(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                 int64_t batch_size, int64_t sequence_length) override {
    model_->Forward(inputs, targets, batch_size, sequence_length);
    return model_->ReadLoss();
  }

 private:
  // Gradient communication for the group's current world: the reducer's
  // buckets hold the gradients (--overlap), or the model's own buffer does.
  void SetUpGradientSync() {
    sync_ = group_.world_size() == 1 ? GradientSync::kNone : options_.gradient_sync;
    gradient_scale_ = 1.0f;
    if (sync_ == GradientSync::kOverlap) {
      std::vector<parallel::GradientSpec> specs;
      for (const gpu::GradientGroup& g : model_->gradient_groups()) {
        specs.push_back({g.name, ccl::dtype::kFloat32, static_cast<size_t>(g.count)});
      }
      parallel::GradientReducerOptions reducer_options;
      reducer_options.bucket_bytes = options_.bucket_bytes;
      reducer_options.register_buckets = options_.register_buckets;
      reducer_options.average = true;
      reducer_ = std::make_unique<parallel::GradientReducer>(*group_.process_group(),
                                                             std::move(specs), reducer_options);
      for (size_t g = 0; g < reducer_->size(); ++g) {
        model_->SetGradientStorage(g, static_cast<float*>(ccl::DataPointer(reducer_->Gradient(g))));
      }
      if (reducer_->needs_scaling()) {
        gradient_scale_ = 1.0f / static_cast<float>(group_.world_size());
      }
    } else if (sync_ == GradientSync::kAfterBackward) {
      // The model's own gradients are one contiguous buffer (group 0 first).
      gradient_scale_ = 1.0f / static_cast<float>(group_.world_size());
    }
  }

  // A lost peer is the trainer's RankLostError, as on the host path: the
  // trainer recovers in place (--on_failure=shrink) and regroups this object
  // for the new world (or makes it again).
  template <typename Work>
  static void Communicating(Work work) {
    try {
      work();
    } catch (const parallel::PeerLostError& error) {
      throw RankLostError(error.what());
    }
  }

  void MicroStepOnDevice(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                         int64_t batch_size, int64_t sequence_length, float loss_weight,
                         bool last_micro_step) {
    model_->Forward(inputs, targets, batch_size, sequence_length, loss_weight);
    if (sync_ == GradientSync::kOverlap) {
      reducer_->SetSynchronize(last_micro_step);
      model_->Backward(loss_weight, [&](size_t g) { reducer_->MarkReady(g, compute_); });
      // An accumulation micro-step ends like a step (nothing was sent): the
      // next backward marks every gradient again.
      if (!last_micro_step) reducer_->WaitAll(compute_);
    } else {
      model_->Backward(loss_weight);
    }
    if (last_micro_step && sync_ == GradientSync::kAfterBackward) AllReduceEverything();
  }

  // --overlap=false: one all-reduce of every gradient once backward is done
  // (a sum; OptimizerStep divides).
  void AllReduceEverything() {
    // Without a reducer the gradients are the model's own flat buffer, group
    // 0 at its start.
    const ccl::FlatTensor tensor(model_->gradient_storage(0), ccl::dtype::kFloat32,
                                 model_->num_parameters(), DLDevice{kDLCUDA, device_index_});
    group_.process_group()
        ->AllReduceAsync(tensor, tensor, ccl::ReduceOp::kSum, compute_)
        ->WaitOnStream(compute_);
  }

  DeviceTrainingOptions options_;
  DataParallelGroup& group_;
  int device_index_ = 0;
  GradientSync sync_ = GradientSync::kNone;
  float gradient_scale_ = 1.0f;
  std::unique_ptr<OwnedStream> owned_stream_;
  ccl::Stream compute_;
  std::unique_ptr<gpu::DeviceModel> model_;
  std::unique_ptr<parallel::GradientReducer> reducer_;
};

}  // namespace

bool DeviceTrainingAvailable() { return true; }

std::unique_ptr<DeviceTraining> CreateDeviceTraining(const DeviceTrainingOptions& options,
                                                     const Model& weights,
                                                     DataParallelGroup& group) {
  return std::make_unique<CudaTraining>(options, weights, group);
}

}  // namespace infini::examples::gpt2
