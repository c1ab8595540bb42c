#include "infini/data/loader.h"

#include <dlpack/dlpack.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "infini/data/error.h"

namespace infini::data {
namespace {

SamplerOptions ToSamplerOptions(const LoaderOptions& options, int64_t num_samples) {
  SamplerOptions sampler;
  sampler.num_samples = num_samples;
  sampler.micro_batch_size = options.micro_batch_size;
  sampler.data_parallel_size = options.data_parallel_size;
  sampler.data_parallel_rank = options.data_parallel_rank;
  sampler.gradient_accumulation_steps = options.gradient_accumulation_steps;
  sampler.tail_policy = options.tail_policy;
  sampler.shuffle = options.shuffle;
  sampler.seed = options.seed;
  return sampler;
}

// One micro-batch read from the source: its windows of T + 1 raw tokens, and
// the loader state once it has been delivered.
struct PreparedMicroBatch {
  MicroBatchInfo info;
  std::vector<uint32_t> windows;
  int64_t state_after = 0;
};

// Walks the sampler's steps micro-batch by micro-batch.
class MicroBatchCursor {
 public:
  MicroBatchCursor(const BatchSampler& sampler, const SampleSource& source, int64_t consumed)
      : sampler_(sampler), source_(source), step_start_(consumed) {}

  PreparedMicroBatch ReadNext() {
    if (!plan_) plan_ = sampler_.PlanStep(step_start_);
    const int64_t mbs = sampler_.options().micro_batch_size;
    const int64_t window_tokens = source_.sequence_length() + 1;
    PreparedMicroBatch batch;
    batch.info.epoch = plan_->epoch;
    batch.info.micro_step = micro_step_;
    batch.info.consumed_samples = step_start_;
    batch.windows.assign(static_cast<size_t>(mbs * window_tokens), 0);
    for (int64_t row = 0; row < mbs; ++row) {
      const int64_t index = plan_->sample_indices[static_cast<size_t>(micro_step_ * mbs + row)];
      batch.info.sample_indices.push_back(index);
      batch.info.valid.push_back(index == kPaddingIndex ? 0 : 1);
      if (index == kPaddingIndex) continue;
      const TokenSpan window = source_.Window(index);
      uint32_t* destination = batch.windows.data() + row * window_tokens;
      const size_t count = std::min(window.size(), static_cast<size_t>(window_tokens));
      for (size_t t = 0; t < count; ++t) destination[t] = window[t];
    }
    if (++micro_step_ == sampler_.options().gradient_accumulation_steps) {
      step_start_ = sampler_.NextConsumed(step_start_);
      micro_step_ = 0;
      plan_.reset();
      batch.state_after = step_start_;
    } else {
      batch.state_after = batch.info.consumed_samples;
    }
    return batch;
  }

 private:
  const BatchSampler& sampler_;
  const SampleSource& source_;
  int64_t step_start_;
  int64_t micro_step_ = 0;
  std::optional<StepPlan> plan_;
};

// Reads micro-batches ahead on its own thread into a bounded queue. The
// first error ends reading; the consumer gets it after the batches before it.
class Prefetcher {
 public:
  Prefetcher(MicroBatchCursor cursor, int64_t depth, std::chrono::milliseconds timeout)
      : cursor_(std::move(cursor)), depth_(static_cast<size_t>(depth)), timeout_(timeout) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Prefetcher() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  PreparedMicroBatch Take() {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, timeout_, [this] { return !queue_.empty() || error_; })) {
      throw Error("data loader: the prefetch thread delivered nothing within " +
                  std::to_string(timeout_.count()) +
                  " ms (prefetch_timeout): is the data file on a stalled file system?");
    }
    if (queue_.empty()) std::rethrow_exception(error_);
    PreparedMicroBatch batch = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    changed_.notify_all();
    return batch;
  }

 private:
  void Run() {
    while (true) {
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [this] { return stopping_ || queue_.size() < depth_; });
        if (stopping_) return;
      }
      try {
        PreparedMicroBatch batch = cursor_.ReadNext();
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(batch));
      } catch (...) {
        std::lock_guard lock(mutex_);
        error_ = std::current_exception();
      }
      changed_.notify_all();
      std::lock_guard lock(mutex_);
      if (error_) return;
    }
  }

  MicroBatchCursor cursor_;
  const size_t depth_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<PreparedMicroBatch> queue_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;
};

template <typename Token>
void FillRows(const PreparedMicroBatch& batch, int64_t sequence_length, int64_t padding_target,
              Token* inputs, Token* targets) {
  const auto rows = static_cast<int64_t>(batch.info.valid.size());
  const int64_t window_tokens = sequence_length + 1;
  for (int64_t row = 0; row < rows; ++row) {
    Token* input_row = inputs + row * sequence_length;
    Token* target_row = targets + row * sequence_length;
    if (batch.info.valid[static_cast<size_t>(row)] == 0) {
      std::fill(input_row, input_row + sequence_length, Token{0});
      std::fill(target_row, target_row + sequence_length, static_cast<Token>(padding_target));
      continue;
    }
    const uint32_t* window = batch.windows.data() + row * window_tokens;
    for (int64_t t = 0; t < sequence_length; ++t) {
      input_row[t] = static_cast<Token>(window[t]);
      target_row[t] = static_cast<Token>(window[t + 1]);
    }
  }
}

void CheckSpan(const char* name, size_t actual, int64_t expected) {
  if (actual != static_cast<size_t>(expected)) {
    throw InvalidArgumentError(
        std::string(name) + " buffer has " + std::to_string(actual) +
        " tokens: expected micro_batch_size x sequence_length = " + std::to_string(expected));
  }
}

// Returns the tensor's bits per token (32 or 64) after checking that it can
// take one micro-batch.
int CheckTensor(const char* name, const DLTensor& tensor, int64_t rows, int64_t columns) {
  const std::string prefix = std::string(name) + " tensor ";
  if (tensor.data == nullptr) throw InvalidArgumentError(prefix + "has no data pointer");
  if (tensor.device.device_type != kDLCPU && tensor.device.device_type != kDLCUDAHost) {
    throw InvalidArgumentError(prefix + "is on device type " +
                               std::to_string(tensor.device.device_type) +
                               ": expected host memory (kDLCPU or kDLCUDAHost)");
  }
  if (tensor.dtype.code != kDLInt || tensor.dtype.lanes != 1 ||
      (tensor.dtype.bits != 32 && tensor.dtype.bits != 64)) {
    throw InvalidArgumentError(prefix + "has dtype code " + std::to_string(tensor.dtype.code) +
                               " bits " + std::to_string(tensor.dtype.bits) + " lanes " +
                               std::to_string(tensor.dtype.lanes) + ": expected int32 or int64");
  }
  if (tensor.ndim != 2 || tensor.shape[0] != rows || tensor.shape[1] != columns) {
    std::string shape;
    for (int d = 0; d < tensor.ndim; ++d) {
      shape += (d ? "," : "") + std::to_string(tensor.shape[d]);
    }
    throw InvalidArgumentError(prefix + "has shape [" + shape + "]: expected [" +
                               std::to_string(rows) + "," + std::to_string(columns) +
                               "] (micro_batch_size, sequence_length)");
  }
  if (tensor.strides != nullptr &&
      !(tensor.strides[1] == 1 && (tensor.strides[0] == columns || rows == 1))) {
    throw InvalidArgumentError(prefix + "has strides [" + std::to_string(tensor.strides[0]) + "," +
                               std::to_string(tensor.strides[1]) +
                               "]: expected a compact row-major tensor");
  }
  return tensor.dtype.bits;
}

template <typename Token>
Token* TensorData(const DLTensor& tensor) {
  return reinterpret_cast<Token*>(static_cast<char*>(tensor.data) + tensor.byte_offset);
}

}  // namespace

class DataLoader::Impl {
 public:
  Impl(std::shared_ptr<const SampleSource> source, const LoaderOptions& options, LoaderState state)
      : source_(std::move(source)),
        options_(options),
        sampler_(ToSamplerOptions(options, source_->num_samples()), state.consumed_samples) {
    if (options.prefetch_micro_batches < 0) {
      throw InvalidArgumentError(
          "prefetch_micro_batches=" + std::to_string(options.prefetch_micro_batches) +
          ": expected 0 (no prefetch) or a positive queue depth");
    }
    Restart(state.consumed_samples);
  }

  const BatchSampler& sampler() const { return sampler_; }
  int64_t sequence_length() const { return source_->sequence_length(); }
  int64_t tokens_per_micro_batch() const {
    return options_.micro_batch_size * source_->sequence_length();
  }

  PreparedMicroBatch TakeNext() {
    PreparedMicroBatch batch = prefetcher_ ? prefetcher_->Take() : cursor_->ReadNext();
    delivered_state_ = batch.state_after;
    return batch;
  }

  template <typename Token>
  MicroBatchInfo NextInto(Token* inputs, Token* targets) {
    PreparedMicroBatch batch = TakeNext();
    FillRows(batch, sequence_length(), options_.padding_target, inputs, targets);
    return std::move(batch.info);
  }

  LoaderState state() const { return {delivered_state_}; }

  void Restart(int64_t consumed_samples) {
    prefetcher_.reset();
    cursor_.reset();
    sampler_.set_consumed_samples(consumed_samples);
    delivered_state_ = consumed_samples;
    MicroBatchCursor cursor(sampler_, *source_, consumed_samples);
    if (options_.prefetch_micro_batches > 0) {
      prefetcher_ = std::make_unique<Prefetcher>(std::move(cursor), options_.prefetch_micro_batches,
                                                 options_.prefetch_timeout);
    } else {
      cursor_.emplace(std::move(cursor));
    }
  }

 private:
  std::shared_ptr<const SampleSource> source_;
  LoaderOptions options_;
  // Only the cursor (one thread at a time) reads it; its shuffle cache is
  // therefore never touched concurrently.
  BatchSampler sampler_;
  std::optional<MicroBatchCursor> cursor_;
  std::unique_ptr<Prefetcher> prefetcher_;
  int64_t delivered_state_ = 0;
};

DataLoader::DataLoader(std::shared_ptr<const SampleSource> source, const LoaderOptions& options,
                       LoaderState state) {
  if (!source) throw InvalidArgumentError("data loader: the sample source is null");
  impl_ = std::make_unique<Impl>(std::move(source), options, state);
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::global_batch_size() const { return impl_->sampler().global_batch_size(); }
int64_t DataLoader::steps_per_epoch() const { return impl_->sampler().steps_per_epoch(); }
int64_t DataLoader::micro_batch_size() const { return impl_->sampler().options().micro_batch_size; }
int64_t DataLoader::sequence_length() const { return impl_->sequence_length(); }
int64_t DataLoader::tokens_per_micro_batch() const { return impl_->tokens_per_micro_batch(); }

MicroBatchInfo DataLoader::Next(std::span<int32_t> inputs, std::span<int32_t> targets) {
  CheckSpan("inputs", inputs.size(), tokens_per_micro_batch());
  CheckSpan("targets", targets.size(), tokens_per_micro_batch());
  return impl_->NextInto(inputs.data(), targets.data());
}

MicroBatchInfo DataLoader::Next(std::span<int64_t> inputs, std::span<int64_t> targets) {
  CheckSpan("inputs", inputs.size(), tokens_per_micro_batch());
  CheckSpan("targets", targets.size(), tokens_per_micro_batch());
  return impl_->NextInto(inputs.data(), targets.data());
}

MicroBatchInfo DataLoader::Next(const DLTensor& inputs, const DLTensor& targets) {
  const int64_t rows = micro_batch_size();
  const int64_t columns = sequence_length();
  const int input_bits = CheckTensor("inputs", inputs, rows, columns);
  const int target_bits = CheckTensor("targets", targets, rows, columns);
  if (input_bits != target_bits) {
    throw InvalidArgumentError("inputs tensor is int" + std::to_string(input_bits) +
                               " and targets tensor int" + std::to_string(target_bits) +
                               ": expected the same dtype");
  }
  if (input_bits == 32) {
    return impl_->NextInto(TensorData<int32_t>(inputs), TensorData<int32_t>(targets));
  }
  return impl_->NextInto(TensorData<int64_t>(inputs), TensorData<int64_t>(targets));
}

LoaderState DataLoader::state() const { return impl_->state(); }

void DataLoader::load_state(const LoaderState& state) {
  if (state.consumed_samples < 0) {
    throw InvalidArgumentError("consumed_samples=" + std::to_string(state.consumed_samples) +
                               ": expected a number >= 0");
  }
  impl_->Restart(state.consumed_samples);
}

}  // namespace infini::data
