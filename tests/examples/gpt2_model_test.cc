// The model's backward pass against central finite differences, and the
// pieces around it (initialization, optimizer, flags).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "adamw.h"
#include "model.h"
#include "options.h"

namespace infini::examples::gpt2 {
namespace {

ModelConfig TinyConfig() {
  ModelConfig config;
  config.vocab_size = 11;
  config.max_sequence_length = 6;
  config.num_layers = 2;
  config.num_heads = 2;
  config.channels = 8;
  return config;
}

struct TinyBatch {
  int64_t batch_size = 2;
  int64_t sequence_length = 5;  // shorter than the maximum on purpose
  std::vector<int32_t> inputs{1, 4, 2, 9, 0, 3, 3, 10, 5, 7};
  std::vector<int32_t> targets{4, 2, 9, 0, 6, 3, -1, 5, 7, 8};  // one skipped target
};

// Weights far from GPT-2's tiny initialization, so every block is in its
// nonlinear range and every gradient is large enough to compare.
void RandomizeWeights(Model& model, uint64_t seed) {
  std::mt19937 engine(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 0.4f);
  for (float& value : model.parameters()) value = normal(engine);
}

TEST(Gpt2Model, BackwardMatchesFiniteDifferencesForEveryTensor) {
  Model model(TinyConfig());
  RandomizeWeights(model, 7);
  const TinyBatch batch;
  auto loss = [&] {
    return static_cast<double>(
        model.Forward(batch.inputs, batch.targets, batch.batch_size, batch.sequence_length));
  };
  model.ZeroGradients();
  loss();
  model.Backward();
  const std::vector<float> analytic(model.gradients().begin(), model.gradients().end());

  constexpr float kStep = 1e-2f;
  for (const ParameterTensor& tensor : model.tensors()) {
    // Check the entries with the largest gradients (a wrong formula shows
    // there) plus a spread of the rest; position rows beyond the sequence
    // get no gradient and are checked to stay zero.
    std::vector<int64_t> order(tensor.count);
    for (int64_t i = 0; i < tensor.count; ++i) order[i] = tensor.offset + i;
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return std::abs(analytic[a]) > std::abs(analytic[b]); });
    std::vector<int64_t> checked(order.begin(), order.begin() + std::min<int64_t>(6, tensor.count));
    for (int64_t i = 6; i < tensor.count; i += std::max<int64_t>(1, tensor.count / 6)) {
      checked.push_back(order[i]);
    }
    double largest = 0.0;
    for (int64_t index : checked) {
      float& parameter = model.parameters()[index];
      const float saved = parameter;
      parameter = saved + kStep;
      const double loss_plus = loss();
      parameter = saved - kStep;
      const double loss_minus = loss();
      parameter = saved;
      const double numeric = (loss_plus - loss_minus) / (2.0 * kStep);
      largest = std::max(largest, std::abs(numeric));
      EXPECT_NEAR(analytic[index], numeric, 2e-3 + 3e-2 * std::abs(numeric))
          << tensor.name << " element " << index - tensor.offset;
    }
    EXPECT_GT(largest, 1e-3) << tensor.name << ": no sizeable gradient was checked";
  }
}

TEST(Gpt2Model, SkippedTargetsDoNotCountInTheLoss) {
  Model model(TinyConfig());
  RandomizeWeights(model, 3);
  TinyBatch batch;
  const float with_skip =
      model.Forward(batch.inputs, batch.targets, batch.batch_size, batch.sequence_length);
  // The mean over the nine counted targets equals the sum of per-position
  // losses divided by nine: dropping a second target changes the mean.
  batch.targets[0] = -1;
  const float with_two_skips =
      model.Forward(batch.inputs, batch.targets, batch.batch_size, batch.sequence_length);
  EXPECT_NE(with_skip, with_two_skips);
  batch.targets.assign(batch.targets.size(), -1);
  EXPECT_EQ(model.Forward(batch.inputs, batch.targets, batch.batch_size, batch.sequence_length),
            0.0f);
}

TEST(Gpt2Model, BackwardAccumulatesScaledGradients) {
  Model model(TinyConfig());
  RandomizeWeights(model, 5);
  const TinyBatch batch;
  model.ZeroGradients();
  model.Forward(batch.inputs, batch.targets, batch.batch_size, batch.sequence_length);
  model.Backward(1.0f);
  const std::vector<float> once(model.gradients().begin(), model.gradients().end());
  model.ZeroGradients();
  for (int micro_step = 0; micro_step < 2; ++micro_step) {
    model.Forward(batch.inputs, batch.targets, batch.batch_size, batch.sequence_length);
    model.Backward(0.5f);
  }
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_NEAR(model.gradients()[i], once[i], 1e-6f + 1e-5f * std::abs(once[i])) << i;
  }
}

TEST(Gpt2Model, SameSeedGivesSameWeightsAndOtherSeedsDiffer) {
  Model a(TinyConfig()), b(TinyConfig()), c(TinyConfig());
  a.InitializeWeights(42);
  b.InitializeWeights(42);
  c.InitializeWeights(43);
  EXPECT_TRUE(std::equal(a.parameters().begin(), a.parameters().end(), b.parameters().begin()));
  EXPECT_FALSE(std::equal(a.parameters().begin(), a.parameters().end(), c.parameters().begin()));
}

TEST(Gpt2Model, RejectsTokensOutsideTheVocabulary) {
  Model model(TinyConfig());
  TinyBatch batch;
  batch.inputs[3] = 11;
  EXPECT_THROW(model.Forward(batch.inputs, batch.targets, batch.batch_size, batch.sequence_length),
               std::invalid_argument);
}

TEST(Gpt2Model, RejectsHeadsThatDoNotDivideChannels) {
  ModelConfig config = TinyConfig();
  config.num_heads = 3;
  EXPECT_THROW(Model{config}, std::invalid_argument);
}

TEST(Gpt2AdamW, FirstStepMovesEachParameterByTheLearningRateAgainstItsGradient) {
  // With bias correction, step 1 is lr · g/(|g| + eps) = lr · sign(g).
  std::vector<ParameterTensor> tensors{{"w", 0, 3, true}};
  AdamWOptions options;
  options.learning_rate = 0.1f;
  AdamW optimizer(tensors, 3, options);
  std::vector<float> parameters{1.0f, 1.0f, 1.0f};
  const std::vector<float> gradients{2.0f, -0.5f, 0.0f};
  optimizer.Step(parameters, gradients);
  EXPECT_NEAR(parameters[0], 0.9f, 1e-6f);
  EXPECT_NEAR(parameters[1], 1.1f, 1e-6f);
  EXPECT_FLOAT_EQ(parameters[2], 1.0f);
  EXPECT_EQ(optimizer.steps_taken(), 1);
}

TEST(Gpt2AdamW, WeightDecayAppliesOnlyToDecayingTensors) {
  std::vector<ParameterTensor> tensors{{"matrix", 0, 1, true}, {"bias", 1, 1, false}};
  AdamWOptions options;
  options.learning_rate = 0.1f;
  options.weight_decay = 0.5f;
  AdamW optimizer(tensors, 2, options);
  std::vector<float> parameters{2.0f, 2.0f};
  optimizer.Step(parameters, std::vector<float>{0.0f, 0.0f});
  EXPECT_NEAR(parameters[0], 2.0f - 0.1f * 0.5f * 2.0f, 1e-6f);
  EXPECT_FLOAT_EQ(parameters[1], 2.0f);
}

TEST(Gpt2AdamW, ClippingScalesTheNormDownToTheLimit) {
  std::vector<float> gradients{3.0f, 4.0f};
  EXPECT_FLOAT_EQ(ClipGradientNorm(gradients, 1.0f), 5.0f);
  EXPECT_NEAR(gradients[0], 0.6f, 1e-6f);
  EXPECT_NEAR(gradients[1], 0.8f, 1e-6f);
  std::vector<float> small{0.3f, 0.4f};
  ClipGradientNorm(small, 1.0f);
  EXPECT_FLOAT_EQ(small[0], 0.3f);
}

TEST(Gpt2Options, ParsesBothFlagSpellings) {
  const TrainOptions options = ParseTrainOptions(
      {"--num_layers=3", "--channels", "32", "--num_heads=8", "--learning_rate=1e-4", "--resume",
       "--checkpoint_dir=/tmp/x", "--shuffle=false"});
  EXPECT_EQ(options.model.num_layers, 3);
  EXPECT_EQ(options.model.channels, 32);
  EXPECT_EQ(options.model.num_heads, 8);
  EXPECT_FLOAT_EQ(options.learning_rate, 1e-4f);
  EXPECT_TRUE(options.resume);
  EXPECT_FALSE(options.shuffle);
}

TEST(Gpt2Options, TakesInfiniTrainsFlagNames) {
  const TrainOptions options = ParseTrainOptions(
      {"--input_bin=/data/train.bin", "--input_val_bin=/data/val.bin", "--batch_size=8",
       "--sequence_length=128", "--total_batch_size=4096", "--num_iteration=7", "--dtype=bfloat16",
       "--learning_rate=6e-4", "--val_loss_every=5", "--nthread_per_process=2"});
  EXPECT_EQ(options.train_data, "/data/train.bin");
  EXPECT_EQ(options.val_data, "/data/val.bin");
  EXPECT_EQ(options.micro_batch_size, 8);
  EXPECT_EQ(options.sequence_length, 128);
  EXPECT_EQ(options.model.max_sequence_length, 128);
  EXPECT_EQ(options.total_batch_size, 4096);
  EXPECT_EQ(options.steps, 7);
  EXPECT_EQ(options.dtype, TrainDtype::kBFloat16);
  EXPECT_FLOAT_EQ(options.learning_rate, 6e-4f);
  EXPECT_EQ(options.val_every, 5);
  EXPECT_EQ(options.nthread_per_process, 2);
  EXPECT_EQ(options.gradient_sync, GradientSync::kOverlap);
  // 4096 tokens = 8 × 128 × 2 ranks × 2 micro-steps.
  EXPECT_EQ(AccumulationSteps(options, 2), 2);
  EXPECT_THROW(AccumulationSteps(options, 3), UsageError);
}

TEST(Gpt2Options, D12IsGpt2Small) {
  const TrainOptions options = ParseTrainOptions({"--model=d12", "--sequence_length=1024"});
  EXPECT_EQ(options.model.num_layers, 12);
  EXPECT_EQ(options.model.num_heads, 12);
  EXPECT_EQ(options.model.channels, 768);
  EXPECT_EQ(options.model.vocab_size, 50257);
  EXPECT_EQ(options.model.max_sequence_length, 1024);
  // GPT-2 small's 124M parameters (its 50257-token embedding, unpadded).
  const Model model(options.model);
  EXPECT_EQ(model.num_parameters(), 124439808);
}

TEST(Gpt2Options, GradientSyncFlags) {
  EXPECT_EQ(ParseTrainOptions({"--overlap=false"}).gradient_sync, GradientSync::kAfterBackward);
  EXPECT_EQ(ParseTrainOptions({"--no_grad_sync"}).gradient_sync, GradientSync::kNone);
  EXPECT_EQ(ParseTrainOptions({"--no_grad_sync", "--overlap=false"}).gradient_sync,
            GradientSync::kNone);
  EXPECT_TRUE(ParseTrainOptions({}).register_buckets);
  EXPECT_FALSE(ParseTrainOptions({"--register_buckets=false"}).register_buckets);
}

TEST(Gpt2Options, EachBadValueNamesItsFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--steps=-1"}, "--steps='-1'"},
      {{"--micro_batch_size=0"}, "--micro_batch_size='0'"},
      {{"--learning_rate=abc"}, "--learning_rate='abc'"},
      {{"--learning_rate=0"}, "--learning_rate='0'"},
      {{"--num_heads=3"}, "--num_heads=3"},
      {{"--no_such_flag=1"}, "--no_such_flag"},
      {{"--steps"}, "--steps needs a value"},
      {{"--resume"}, "--resume needs --checkpoint_dir"},
      {{"--shuffle=maybe"}, "--shuffle='maybe'"},
      {{"stray"}, "'stray'"},
      {{"--batch_size=0"}, "--batch_size='0'"},
      {{"--num_iteration=x"}, "--num_iteration='x'"},
      {{"--dtype=fp16"}, "--dtype='fp16'"},
      {{"--model=d13"}, "--model='d13'"},
      {{"--model=d12", "--num_layers=2"}, "--num_layers sizes --model=tiny only"},
      {{"--model=d12", "--sequence_length=2048"}, "--sequence_length=2048"},
      {{"--total_batch_size=-1"}, "--total_batch_size='-1'"},
      {{"--total_batch_size=512", "--gradient_accumulation_steps=2"}, "--total_batch_size and"},
      {{"--nthread_per_process=0"}, "--nthread_per_process='0'"},
      {{"--overlap=sometimes"}, "--overlap='sometimes'"},
      {{"--val_loss_every=-2"}, "--val_loss_every='-2'"},
  };
  for (const auto& [arguments, expected] : cases) {
    try {
      ParseTrainOptions(arguments);
      ADD_FAILURE() << arguments[0] << " was accepted";
    } catch (const UsageError& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos)
          << error.what() << " does not name " << expected;
    }
  }
}

}  // namespace
}  // namespace infini::examples::gpt2
