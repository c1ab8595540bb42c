#include "infini/data/loader.h"

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "infini/data/error.h"

namespace infini::data {
namespace {

// Sample i holds tokens i*1000 + t, so every delivered token names its
// sample and position. Optionally fails when asked for one sample.
class SyntheticSource : public SampleSource {
 public:
  SyntheticSource(int64_t num_samples, int64_t sequence_length, int64_t failing_sample = -1)
      : num_samples_(num_samples),
        sequence_length_(sequence_length),
        failing_sample_(failing_sample) {
    windows_.resize(static_cast<size_t>(num_samples * (sequence_length + 1)));
    for (int64_t i = 0; i < num_samples; ++i) {
      for (int64_t t = 0; t <= sequence_length; ++t) {
        windows_[static_cast<size_t>(i * (sequence_length + 1) + t)] =
            static_cast<uint16_t>(i * 100 + t);
      }
    }
  }
  int64_t num_samples() const override { return num_samples_; }
  int64_t sequence_length() const override { return sequence_length_; }
  TokenSpan Window(int64_t sample_index) const override {
    if (sample_index == failing_sample_) {
      throw std::runtime_error("disk read failed for sample " + std::to_string(sample_index));
    }
    return std::span<const uint16_t>(windows_).subspan(
        static_cast<size_t>(sample_index * (sequence_length_ + 1)),
        static_cast<size_t>(sequence_length_ + 1));
  }

 private:
  int64_t num_samples_;
  int64_t sequence_length_;
  int64_t failing_sample_;
  std::vector<uint16_t> windows_;
};

struct Delivered {
  MicroBatchInfo info;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
  LoaderState state_after;
};

Delivered TakeOne(DataLoader& loader) {
  Delivered delivered;
  delivered.inputs.resize(static_cast<size_t>(loader.tokens_per_micro_batch()));
  delivered.targets.resize(delivered.inputs.size());
  delivered.info =
      loader.Next(std::span<int32_t>(delivered.inputs), std::span<int32_t>(delivered.targets));
  delivered.state_after = loader.state();
  return delivered;
}

std::vector<Delivered> TakeMany(DataLoader& loader, int count) {
  std::vector<Delivered> all;
  for (int i = 0; i < count; ++i) all.push_back(TakeOne(loader));
  return all;
}

void ExpectSame(const std::vector<Delivered>& a, const std::vector<Delivered>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].info.sample_indices, b[i].info.sample_indices) << "micro-batch " << i;
    EXPECT_EQ(a[i].info.micro_step, b[i].info.micro_step) << "micro-batch " << i;
    EXPECT_EQ(a[i].info.consumed_samples, b[i].info.consumed_samples) << "micro-batch " << i;
    EXPECT_EQ(a[i].inputs, b[i].inputs) << "micro-batch " << i;
    EXPECT_EQ(a[i].targets, b[i].targets) << "micro-batch " << i;
    EXPECT_EQ(a[i].state_after.consumed_samples, b[i].state_after.consumed_samples);
  }
}

LoaderOptions ShuffledAccumulatingOptions() {
  LoaderOptions options;
  options.micro_batch_size = 3;
  options.data_parallel_size = 2;
  options.data_parallel_rank = 1;
  options.gradient_accumulation_steps = 2;
  options.shuffle = true;
  options.seed = 99;
  return options;
}

TEST(DataLoader, DeliversTheSamplersSamplesAsInputAndShiftedTarget) {
  auto source = std::make_shared<SyntheticSource>(50, 4);
  LoaderOptions options = ShuffledAccumulatingOptions();
  DataLoader loader(source, options);
  SamplerOptions sampler_options;
  sampler_options.num_samples = 50;
  sampler_options.micro_batch_size = 3;
  sampler_options.data_parallel_size = 2;
  sampler_options.data_parallel_rank = 1;
  sampler_options.gradient_accumulation_steps = 2;
  sampler_options.shuffle = true;
  sampler_options.seed = 99;
  BatchSampler sampler(sampler_options);
  for (int step = 0; step < 20; ++step) {
    const StepPlan plan = sampler.Next();
    for (int64_t micro = 0; micro < 2; ++micro) {
      const Delivered batch = TakeOne(loader);
      EXPECT_EQ(batch.info.micro_step, micro);
      EXPECT_EQ(batch.info.epoch, plan.epoch);
      EXPECT_EQ(batch.info.consumed_samples, plan.consumed_samples);
      for (int64_t row = 0; row < 3; ++row) {
        const int64_t sample = plan.sample_indices[static_cast<size_t>(micro * 3 + row)];
        EXPECT_EQ(batch.info.sample_indices[static_cast<size_t>(row)], sample);
        for (int64_t t = 0; t < 4; ++t) {
          EXPECT_EQ(batch.inputs[static_cast<size_t>(row * 4 + t)], sample * 100 + t);
          EXPECT_EQ(batch.targets[static_cast<size_t>(row * 4 + t)], sample * 100 + t + 1);
        }
      }
    }
  }
}

TEST(DataLoader, PrefetchDeliversTheSameSequenceAsReadingInline) {
  for (int64_t depth : {1, 2, 7}) {
    auto source = std::make_shared<SyntheticSource>(37, 5);
    LoaderOptions options = ShuffledAccumulatingOptions();
    DataLoader inline_loader(source, options);
    options.prefetch_micro_batches = depth;
    DataLoader prefetching_loader(source, options);
    ExpectSame(TakeMany(inline_loader, 60), TakeMany(prefetching_loader, 60));
  }
}

TEST(DataLoader, ResumesFromSavedStateExactly) {
  for (int64_t prefetch : {0, 3}) {
    auto source = std::make_shared<SyntheticSource>(29, 3);
    LoaderOptions options = ShuffledAccumulatingOptions();
    options.prefetch_micro_batches = prefetch;
    DataLoader uninterrupted(source, options);
    const std::vector<Delivered> expected = TakeMany(uninterrupted, 40);
    // Stop after a whole step (micro-batch 2k+1), save, resume in a new loader.
    for (size_t stop : {1u, 5u, 13u, 21u}) {
      DataLoader resumed(source, options, expected[stop].state_after);
      const std::vector<Delivered> rest = TakeMany(resumed, static_cast<int>(39 - stop));
      ExpectSame(
          std::vector<Delivered>(expected.begin() + static_cast<long>(stop) + 1, expected.end()),
          rest);
    }
  }
}

TEST(DataLoader, StateTakenInTheMiddleOfAStepNamesTheStartOfThatStep) {
  auto source = std::make_shared<SyntheticSource>(29, 3);
  DataLoader loader(source, ShuffledAccumulatingOptions());
  const Delivered first_micro = TakeOne(loader);
  EXPECT_EQ(first_micro.info.micro_step, 0);
  EXPECT_EQ(loader.state().consumed_samples, 0);
  TakeOne(loader);
  EXPECT_EQ(loader.state().consumed_samples, 12);  // 3 x 2 x 2
}

TEST(DataLoader, LoadStateDropsWhatWasPrefetchedAndRestarts) {
  auto source = std::make_shared<SyntheticSource>(40, 2);
  LoaderOptions options = ShuffledAccumulatingOptions();
  options.prefetch_micro_batches = 4;
  DataLoader loader(source, options);
  const std::vector<Delivered> first = TakeMany(loader, 6);
  loader.load_state(LoaderState{0});
  ExpectSame(first, TakeMany(loader, 6));
  EXPECT_THROW(loader.load_state(LoaderState{-1}), InvalidArgumentError);
}

TEST(DataLoader, PropagatesAReadErrorFromThePrefetchThreadAfterTheBatchesBeforeIt) {
  LoaderOptions options;
  options.micro_batch_size = 2;
  options.prefetch_micro_batches = 3;
  // Sample 5 is in the third micro-batch.
  DataLoader loader(std::make_shared<SyntheticSource>(20, 2, 5), options);
  TakeOne(loader);
  TakeOne(loader);
  try {
    TakeOne(loader);
    FAIL() << "the failing read was not reported";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()), "disk read failed for sample 5");
  }
  EXPECT_THROW(TakeOne(loader), std::runtime_error) << "the loader stays failed";
}

TEST(DataLoader, PropagatesAReadErrorWithoutPrefetch) {
  LoaderOptions options;
  options.micro_batch_size = 2;
  DataLoader loader(std::make_shared<SyntheticSource>(20, 2, 0), options);
  EXPECT_THROW(TakeOne(loader), std::runtime_error);
}

// Every read takes `delay`, like a stalled network file system.
class StalledSource : public SyntheticSource {
 public:
  explicit StalledSource(std::chrono::milliseconds delay) : SyntheticSource(10, 2), delay_(delay) {}
  TokenSpan Window(int64_t sample_index) const override {
    std::this_thread::sleep_for(delay_);
    return SyntheticSource::Window(sample_index);
  }

 private:
  std::chrono::milliseconds delay_;
};

TEST(DataLoader, NextGivesUpOnAStalledPrefetchThreadAfterTheTimeout) {
  LoaderOptions options;
  options.prefetch_micro_batches = 1;
  options.prefetch_timeout = std::chrono::milliseconds(20);
  DataLoader loader(std::make_shared<StalledSource>(std::chrono::milliseconds(1500)), options);
  try {
    TakeOne(loader);
    FAIL() << "Next() waited for the stalled read";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("prefetch_timeout"), std::string::npos);
  }
}

TEST(DataLoader, ShutsDownCleanlyWithAFullPrefetchQueue) {
  for (int round = 0; round < 20; ++round) {
    LoaderOptions options;
    options.prefetch_micro_batches = 2;
    DataLoader loader(std::make_shared<SyntheticSource>(10, 2), options);
    if (round % 2) TakeOne(loader);
  }  // each destructor joins its thread; a hang fails the test by timeout
}

TEST(DataLoader, MarksPaddingRowsAsInvalidWithThePaddingTarget) {
  LoaderOptions options;
  options.micro_batch_size = 2;
  options.data_parallel_size = 2;
  options.data_parallel_rank = 1;
  options.tail_policy = TailPolicy::kPad;
  options.padding_target = -100;
  DataLoader loader(std::make_shared<SyntheticSource>(7, 3), options);
  TakeOne(loader);                         // samples 2,3
  const Delivered last = TakeOne(loader);  // positions 6,7 of [4..8): sample 6 and padding
  EXPECT_EQ(last.info.sample_indices, (std::vector<int64_t>{6, kPaddingIndex}));
  EXPECT_EQ(last.info.valid, (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(last.inputs, (std::vector<int32_t>{600, 601, 602, 0, 0, 0}));
  EXPECT_EQ(last.targets, (std::vector<int32_t>{601, 602, 603, -100, -100, -100}));
  EXPECT_EQ(last.state_after.consumed_samples, 7);
}

DLTensor HostTensor(void* data, int64_t* shape, uint8_t bits) {
  DLTensor tensor{};
  tensor.data = data;
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 2;
  tensor.dtype = DLDataType{kDLInt, bits, 1};
  tensor.shape = shape;
  return tensor;
}

TEST(DataLoader, FillsDlpackTensorsOfInt32AndInt64) {
  auto source = std::make_shared<SyntheticSource>(30, 4);
  LoaderOptions options = ShuffledAccumulatingOptions();
  DataLoader reference(source, options);
  const std::vector<Delivered> expected = TakeMany(reference, 4);

  DataLoader loader(source, options);
  int64_t shape[2] = {3, 4};
  for (size_t i = 0; i < 4; ++i) {
    if (i % 2 == 0) {
      std::vector<int32_t> inputs(12), targets(12);
      const MicroBatchInfo info =
          loader.Next(HostTensor(inputs.data(), shape, 32), HostTensor(targets.data(), shape, 32));
      EXPECT_EQ(info.sample_indices, expected[i].info.sample_indices);
      EXPECT_EQ(inputs, expected[i].inputs);
      EXPECT_EQ(targets, expected[i].targets);
    } else {
      std::vector<int64_t> inputs(12), targets(12);
      loader.Next(HostTensor(inputs.data(), shape, 64), HostTensor(targets.data(), shape, 64));
      EXPECT_EQ(std::vector<int32_t>(inputs.begin(), inputs.end()), expected[i].inputs);
      EXPECT_EQ(std::vector<int32_t>(targets.begin(), targets.end()), expected[i].targets);
    }
  }
}

TEST(DataLoader, RejectsDlpackTensorsItCannotFill) {
  DataLoader loader(std::make_shared<SyntheticSource>(30, 4), ShuffledAccumulatingOptions());
  std::vector<int64_t> inputs(12), targets(12);
  int64_t shape[2] = {3, 4};
  int64_t wrong_shape[2] = {4, 3};
  DLTensor good = HostTensor(inputs.data(), shape, 64);
  DLTensor target = HostTensor(targets.data(), shape, 64);

  DLTensor on_gpu = good;
  on_gpu.device = DLDevice{kDLCUDA, 0};
  DLTensor float_tensor = good;
  float_tensor.dtype = DLDataType{kDLFloat, 32, 1};
  DLTensor transposed = HostTensor(inputs.data(), wrong_shape, 64);
  int64_t strides[2] = {1, 3};
  DLTensor strided = good;
  strided.strides = strides;
  for (const DLTensor& bad : {on_gpu, float_tensor, transposed, strided}) {
    EXPECT_THROW(loader.Next(bad, target), InvalidArgumentError);
  }
  DLTensor int32_target = HostTensor(targets.data(), shape, 32);
  EXPECT_THROW(loader.Next(good, int32_target), InvalidArgumentError);
  EXPECT_EQ(loader.state().consumed_samples, 0) << "a rejected call consumes nothing";
  EXPECT_NO_THROW(loader.Next(good, target));
}

TEST(DataLoader, RejectsBuffersOfTheWrongSize) {
  DataLoader loader(std::make_shared<SyntheticSource>(30, 4), ShuffledAccumulatingOptions());
  std::vector<int32_t> small(11), right(12);
  try {
    loader.Next(std::span<int32_t>(small), std::span<int32_t>(right));
    FAIL();
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("has 11 tokens"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("= 12"), std::string::npos);
  }
}

TEST(DataLoader, RejectsBadOptions) {
  auto source = std::make_shared<SyntheticSource>(30, 4);
  LoaderOptions options;
  options.data_parallel_size = 2;
  options.data_parallel_rank = 2;
  EXPECT_THROW(DataLoader(source, options), InvalidArgumentError);
  options.data_parallel_rank = 0;
  options.prefetch_micro_batches = -1;
  EXPECT_THROW(DataLoader(source, options), InvalidArgumentError);
  EXPECT_THROW(DataLoader(nullptr, LoaderOptions{}), InvalidArgumentError);
}

}  // namespace
}  // namespace infini::data
