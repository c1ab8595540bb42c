#include "infini/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "infini/data/error.h"

namespace infini::data {
namespace {

struct Shape {
  int64_t micro_batch_size;
  int64_t data_parallel_size;
  int64_t gradient_accumulation_steps;
  int64_t global_batch() const {
    return micro_batch_size * data_parallel_size * gradient_accumulation_steps;
  }
};

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {2, 2, 1}, {3, 2, 1}, {1, 4, 1},
      {2, 4, 1}, {1, 3, 2}, {2, 2, 2}, {1, 8, 1}, {4, 1, 3}, {3, 3, 1},
  };
  return shapes;
}

const std::vector<int64_t> kNumSamples = {1, 2, 5, 7, 8, 12, 13, 16, 31, 64, 97};

SamplerOptions Options(int64_t num_samples, const Shape& shape, int64_t rank, TailPolicy tail,
                       bool shuffle) {
  SamplerOptions options;
  options.num_samples = num_samples;
  options.micro_batch_size = shape.micro_batch_size;
  options.data_parallel_size = shape.data_parallel_size;
  options.data_parallel_rank = rank;
  options.gradient_accumulation_steps = shape.gradient_accumulation_steps;
  options.tail_policy = tail;
  options.shuffle = shuffle;
  options.seed = 1234;
  return options;
}

bool Valid(int64_t num_samples, const Shape& shape, TailPolicy tail) {
  return tail == TailPolicy::kPad || num_samples >= shape.global_batch();
}

// Calls `check(num_samples, shape, tail, shuffle)` for every valid combination.
template <typename Check>
void ForEachCombination(Check check) {
  for (int64_t num_samples : kNumSamples) {
    for (const Shape& shape : Shapes()) {
      for (TailPolicy tail : {TailPolicy::kDrop, TailPolicy::kPad}) {
        if (!Valid(num_samples, shape, tail)) continue;
        for (bool shuffle : {false, true}) check(num_samples, shape, tail, shuffle);
      }
    }
  }
}

std::string Describe(int64_t num_samples, const Shape& shape, TailPolicy tail, bool shuffle) {
  return "num_samples=" + std::to_string(num_samples) +
         " mbs=" + std::to_string(shape.micro_batch_size) +
         " dp=" + std::to_string(shape.data_parallel_size) +
         " accum=" + std::to_string(shape.gradient_accumulation_steps) +
         (tail == TailPolicy::kPad ? " pad" : " drop") + (shuffle ? " shuffle" : "");
}

TEST(BatchSampler, RankSlicesOfEachGlobalBatchAreDisjointAndTheirUnionIsTheGlobalBatch) {
  ForEachCombination([](int64_t num_samples, const Shape& shape, TailPolicy tail, bool shuffle) {
    SCOPED_TRACE(Describe(num_samples, shape, tail, shuffle));
    const int64_t dp = shape.data_parallel_size;
    const int64_t mbs = shape.micro_batch_size;
    std::vector<BatchSampler> ranks;
    for (int64_t r = 0; r < dp; ++r)
      ranks.emplace_back(Options(num_samples, shape, r, tail, shuffle));
    for (int64_t consumed : {0L, 3L, num_samples - 1, num_samples + 5, 3 * num_samples + 1}) {
      if (consumed < 0) continue;
      for (auto& sampler : ranks) sampler.set_consumed_samples(consumed);
      for (int step = 0; step < 6; ++step) {
        const std::vector<int64_t> global = ranks[0].GlobalBatch(ranks[0].consumed_samples());
        std::vector<StepPlan> plans;
        for (auto& sampler : ranks) plans.push_back(sampler.Next());
        std::vector<int64_t> reassembled(global.size(), -2);
        for (int64_t r = 0; r < dp; ++r) {
          EXPECT_EQ(plans[r].consumed_samples, plans[0].consumed_samples);
          ASSERT_EQ(static_cast<int64_t>(plans[r].sample_indices.size()),
                    mbs * shape.gradient_accumulation_steps);
          for (int64_t m = 0; m < shape.gradient_accumulation_steps; ++m) {
            for (int64_t k = 0; k < mbs; ++k) {
              const int64_t position = m * mbs * dp + r * mbs + k;
              ASSERT_EQ(reassembled[position], -2) << "position " << position << " read twice";
              reassembled[position] = plans[r].sample_indices[m * mbs + k];
            }
          }
        }
        EXPECT_EQ(reassembled, global);
        std::set<int64_t> real;
        for (int64_t index : global) {
          if (index == kPaddingIndex) continue;
          EXPECT_TRUE(real.insert(index).second) << "sample " << index << " twice in one batch";
        }
      }
    }
  });
}

TEST(BatchSampler, EveryIndexIsInRangeAndPaddingOnlyAppearsWhenPadding) {
  ForEachCombination([](int64_t num_samples, const Shape& shape, TailPolicy tail, bool shuffle) {
    SCOPED_TRACE(Describe(num_samples, shape, tail, shuffle));
    for (int64_t r = 0; r < shape.data_parallel_size; ++r) {
      BatchSampler sampler(Options(num_samples, shape, r, tail, shuffle), 0);
      for (int step = 0; step < 3 * sampler.steps_per_epoch() + 2; ++step) {
        for (int64_t index : sampler.Next().sample_indices) {
          if (index == kPaddingIndex) {
            EXPECT_EQ(tail, TailPolicy::kPad);
          } else {
            EXPECT_GE(index, 0);
            EXPECT_LT(index, num_samples);
          }
        }
      }
    }
  });
}

TEST(BatchSampler, SequenceAfterResumeEqualsTheUninterruptedSequence) {
  ForEachCombination([](int64_t num_samples, const Shape& shape, TailPolicy tail, bool shuffle) {
    SCOPED_TRACE(Describe(num_samples, shape, tail, shuffle));
    const int64_t rank = shape.data_parallel_size - 1;
    const SamplerOptions options = Options(num_samples, shape, rank, tail, shuffle);
    BatchSampler uninterrupted(options);
    std::vector<StepPlan> expected;
    std::vector<int64_t> state_before;
    const int64_t total_steps = 2 * BatchSampler(options).steps_per_epoch() + 3;
    for (int64_t step = 0; step < total_steps; ++step) {
      state_before.push_back(uninterrupted.consumed_samples());
      expected.push_back(uninterrupted.Next());
    }
    for (int64_t stop = 0; stop < total_steps; ++stop) {
      BatchSampler resumed(options, state_before[stop]);
      for (int64_t step = stop; step < total_steps; ++step) {
        const StepPlan plan = resumed.Next();
        ASSERT_EQ(plan.sample_indices, expected[step].sample_indices) << "resumed at " << stop;
        ASSERT_EQ(plan.epoch, expected[step].epoch);
      }
    }
  });
}

// All ranks' real samples of the steps from `consumed` while they are in
// `epoch` (at most max_steps steps).
std::vector<int64_t> ReadRestOfEpoch(int64_t num_samples, const Shape& shape, TailPolicy tail,
                                     bool shuffle, int64_t epoch, int64_t consumed,
                                     int64_t max_steps, int64_t* consumed_after) {
  std::vector<int64_t> read;
  std::vector<BatchSampler> ranks;
  for (int64_t r = 0; r < shape.data_parallel_size; ++r) {
    ranks.emplace_back(Options(num_samples, shape, r, tail, shuffle), consumed);
  }
  for (int64_t step = 0; step < max_steps && ranks[0].epoch() == epoch; ++step) {
    for (auto& sampler : ranks) {
      for (int64_t index : sampler.Next().sample_indices) {
        if (index != kPaddingIndex) read.push_back(index);
      }
    }
  }
  *consumed_after = ranks[0].consumed_samples();
  return read;
}

TEST(BatchSampler, ResumeWithAnotherBatchShapeReadsEachSampleAtMostOncePerEpoch) {
  for (int64_t num_samples : kNumSamples) {
    for (const Shape& before : Shapes()) {
      for (const Shape& after : Shapes()) {
        for (TailPolicy tail : {TailPolicy::kDrop, TailPolicy::kPad}) {
          if (!Valid(num_samples, before, tail) || !Valid(num_samples, after, tail)) continue;
          for (bool shuffle : {false, true}) {
            SCOPED_TRACE(Describe(num_samples, before, tail, shuffle) + " then " +
                         Describe(num_samples, after, tail, shuffle));
            // Second epoch, so the epoch's seed matters.
            const int64_t epoch_start = num_samples;
            int64_t stopped_at = 0;
            std::vector<int64_t> read =
                ReadRestOfEpoch(num_samples, before, tail, shuffle, 1, epoch_start, 1, &stopped_at);
            int64_t end = 0;
            const std::vector<int64_t> rest =
                ReadRestOfEpoch(num_samples, after, tail, shuffle, 1, stopped_at, 1 << 20, &end);
            read.insert(read.end(), rest.begin(), rest.end());
            EXPECT_EQ(BatchSampler(Options(num_samples, after, 0, tail, shuffle), end).epoch(), 2)
                << "reading ended in the next epoch";
            std::sort(read.begin(), read.end());
            EXPECT_EQ(std::adjacent_find(read.begin(), read.end()), read.end())
                << "a sample was read twice";
            const auto missed = num_samples - static_cast<int64_t>(read.size());
            if (tail == TailPolicy::kPad) {
              EXPECT_EQ(missed, 0);
            } else {
              // Only a dropped tail is never read: shorter than either global batch.
              EXPECT_LT(missed, std::max(before.global_batch(), after.global_batch()));
            }
          }
        }
      }
    }
  }
}

TEST(BatchSampler, UnshuffledDropReadsEachSampleOncePerEpochExceptTheTail) {
  ForEachCombination([](int64_t num_samples, const Shape& shape, TailPolicy tail, bool shuffle) {
    if (tail != TailPolicy::kDrop) return;
    SCOPED_TRACE(Describe(num_samples, shape, tail, shuffle));
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      int64_t end = 0;
      std::vector<int64_t> read = ReadRestOfEpoch(num_samples, shape, tail, shuffle, epoch,
                                                  epoch * num_samples, 1 << 20, &end);
      const int64_t global = shape.global_batch();
      EXPECT_EQ(static_cast<int64_t>(read.size()), num_samples / global * global);
      std::sort(read.begin(), read.end());
      EXPECT_EQ(std::adjacent_find(read.begin(), read.end()), read.end());
      if (!shuffle) {  // Megatron's order: the first samples, the tail dropped
        for (size_t i = 0; i < read.size(); ++i) EXPECT_EQ(read[i], static_cast<int64_t>(i));
      }
    }
  });
}

TEST(BatchSampler, FollowsMegatronLayoutWithoutShuffle) {
  // 2 ranks, micro-batch 2, 2 micro-steps: global batch 8. Rank 1 reads
  // positions [2,4) and [6,8) of each global batch.
  SamplerOptions options;
  options.num_samples = 20;
  options.micro_batch_size = 2;
  options.data_parallel_size = 2;
  options.data_parallel_rank = 1;
  options.gradient_accumulation_steps = 2;
  BatchSampler sampler(options);
  EXPECT_EQ(sampler.global_batch_size(), 8);
  EXPECT_EQ(sampler.steps_per_epoch(), 2);
  EXPECT_EQ(sampler.Next().sample_indices, (std::vector<int64_t>{2, 3, 6, 7}));
  EXPECT_EQ(sampler.consumed_samples(), 8);
  EXPECT_EQ(sampler.Next().sample_indices, (std::vector<int64_t>{10, 11, 14, 15}));
  // Samples 16..19 are the dropped tail: the state names the next epoch.
  EXPECT_EQ(sampler.consumed_samples(), 20);
  const StepPlan next_epoch = sampler.Next();
  EXPECT_EQ(next_epoch.epoch, 1);
  EXPECT_EQ(next_epoch.sample_indices, (std::vector<int64_t>{2, 3, 6, 7}));
}

TEST(BatchSampler, PadsTheLastGlobalBatchWithPaddingIndexOnTheHighestPositions) {
  SamplerOptions options;
  options.num_samples = 10;
  options.micro_batch_size = 2;
  options.data_parallel_size = 2;
  options.tail_policy = TailPolicy::kPad;
  std::vector<std::vector<int64_t>> last_batch_by_rank;
  for (int64_t rank = 0; rank < 2; ++rank) {
    options.data_parallel_rank = rank;
    BatchSampler sampler(options);
    EXPECT_EQ(sampler.steps_per_epoch(), 3);
    sampler.Next();
    sampler.Next();
    const StepPlan last = sampler.Next();
    last_batch_by_rank.push_back(last.sample_indices);
    EXPECT_EQ(sampler.consumed_samples(), 10);
  }
  EXPECT_EQ(last_batch_by_rank[0], (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(last_batch_by_rank[1], (std::vector<int64_t>{kPaddingIndex, kPaddingIndex}));
}

TEST(BatchSampler, PaddingAllowsADatasetSmallerThanOneGlobalBatch) {
  SamplerOptions options;
  options.num_samples = 3;
  options.micro_batch_size = 2;
  options.data_parallel_size = 2;
  options.data_parallel_rank = 1;
  options.tail_policy = TailPolicy::kPad;
  BatchSampler sampler(options);
  EXPECT_EQ(sampler.Next().sample_indices, (std::vector<int64_t>{2, kPaddingIndex}));
  EXPECT_EQ(sampler.Next().sample_indices, (std::vector<int64_t>{2, kPaddingIndex}));
}

TEST(BatchSampler, ShuffledOrderIsIdenticalOnEveryRank) {
  for (int64_t num_samples : {16L, 97L}) {
    const Shape shape{2, 4, 1};
    std::vector<std::vector<int64_t>> globals;
    for (int64_t r = 0; r < 4; ++r) {
      BatchSampler sampler(Options(num_samples, shape, r, TailPolicy::kDrop, true));
      std::vector<int64_t> all;
      for (int64_t c = 0; c < 3 * num_samples; c = sampler.NextConsumed(c)) {
        const auto batch = sampler.GlobalBatch(c);
        all.insert(all.end(), batch.begin(), batch.end());
      }
      globals.push_back(all);
    }
    for (int64_t r = 1; r < 4; ++r) EXPECT_EQ(globals[r], globals[0]);
  }
}

TEST(BatchSampler, ShuffledOrderIsAPermutationThatDiffersAcrossEpochsAndSeeds) {
  const std::vector<int64_t> epoch0 = ShuffledOrder(100, 7, 0);
  const std::vector<int64_t> epoch1 = ShuffledOrder(100, 7, 1);
  const std::vector<int64_t> other_seed = ShuffledOrder(100, 8, 0);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_NE(epoch0, other_seed);
  EXPECT_EQ(epoch0, ShuffledOrder(100, 7, 0));
  for (const auto& order : {epoch0, epoch1, other_seed}) {
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[i], i);
  }
}

TEST(BatchSampler, ShuffledOrderMatchesItsSpecification) {
  // Pins the documented algorithm (mt19937_64, SplitMix64 seeding, rejection
  // sampling, Fisher-Yates from the end): a change here breaks resuming
  // checkpoints written by an earlier build, or mixing platforms. The
  // expected order was computed by an independent Python implementation.
  EXPECT_EQ(ShuffledOrder(10, 1234, 0), (std::vector<int64_t>{2, 0, 3, 5, 9, 1, 7, 6, 4, 8}));
}

TEST(BatchSampler, RejectsARankOutsideTheDataParallelGroup) {
  SamplerOptions options;
  options.num_samples = 100;
  options.data_parallel_size = 4;
  options.data_parallel_rank = 4;
  try {
    BatchSampler sampler(options);
    FAIL() << "rank 4 of 4 was accepted";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("data_parallel_rank=4"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("data_parallel_size=4"), std::string::npos);
  }
  options.data_parallel_rank = -1;
  EXPECT_THROW(BatchSampler{options}, InvalidArgumentError);
}

TEST(BatchSampler, RejectsADatasetSmallerThanOneGlobalBatchWhenDropping) {
  SamplerOptions options;
  options.num_samples = 7;
  options.micro_batch_size = 2;
  options.data_parallel_size = 4;
  try {
    BatchSampler sampler(options);
    FAIL() << "7 samples for a global batch of 8 were accepted";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("num_samples=7"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("= 8"), std::string::npos);
  }
}

TEST(BatchSampler, RejectsNonPositiveSizesAndNegativeConsumedSamples) {
  for (auto field :
       {&SamplerOptions::num_samples, &SamplerOptions::micro_batch_size,
        &SamplerOptions::data_parallel_size, &SamplerOptions::gradient_accumulation_steps}) {
    SamplerOptions options;
    options.num_samples = 10;
    options.*field = 0;
    EXPECT_THROW(BatchSampler{options}, InvalidArgumentError);
  }
  SamplerOptions options;
  options.num_samples = 10;
  EXPECT_THROW(BatchSampler(options, -1), InvalidArgumentError);
}

}  // namespace
}  // namespace infini::data
