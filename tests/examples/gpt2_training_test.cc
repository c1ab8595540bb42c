// The training loop in one process: the loss falls, and a resumed run
// continues exactly where a checkpoint left off.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "checkpoint.h"
#include "trainer.h"

namespace infini::examples::gpt2 {
namespace {

namespace fs = std::filesystem;

class OneRank : public DataParallelGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string description() const override { return "test"; }
  void AllReduceAverage(std::span<float>) override {}
  void BroadcastFromMain(std::span<std::byte>) override {}
};

TrainOptions CorpusOptions() {
  TrainOptions options;
  options.train_data = std::string(GPT2_CORPUS_DIR) + "/tiny_corpus_train.bin";
  options.val_data = std::string(GPT2_CORPUS_DIR) + "/tiny_corpus_val.bin";
  return options;
}

class TemporaryDirectory {
 public:
  TemporaryDirectory()
      : path_(fs::temp_directory_path() /
              ("gpt2_test_" + std::to_string(getpid()) + "_" + std::to_string(counter_++))) {
    fs::create_directories(path_);
  }
  ~TemporaryDirectory() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(Gpt2Training, LossFallsOverTwentySteps) {
  TrainOptions options = CorpusOptions();  // the defaults users get
  options.steps = 20;
  OneRank group;
  std::ostringstream log;
  const TrainingSummary summary = Train(options, group, log);
  ASSERT_EQ(summary.step_losses.size(), 20u);
  // Byte-level start: about ln(256) = 5.55.
  EXPECT_NEAR(summary.step_losses.front(), std::log(256.0f), 0.2f);
  const float first =
      std::accumulate(summary.step_losses.begin(), summary.step_losses.begin() + 5, 0.0f) / 5;
  const float last =
      std::accumulate(summary.step_losses.end() - 5, summary.step_losses.end(), 0.0f) / 5;
  EXPECT_LT(last, first - 1.0f) << log.str();
  EXPECT_GT(summary.validation_loss, 0.0f);
  EXPECT_LT(summary.validation_loss, std::log(256.0f) - 1.0f) << log.str();
  EXPECT_NE(log.str().find("step   20/20 | loss"), std::string::npos) << log.str();
}

TrainOptions SmallOptions() {
  TrainOptions options = CorpusOptions();
  options.model.channels = 32;
  options.model.max_sequence_length = 32;
  options.sequence_length = 32;
  options.micro_batch_size = 2;
  options.val_batches = 1;
  return options;
}

TEST(Gpt2Training, ResumedRunRepeatsTheUninterruptedOneExactly) {
  OneRank group;
  std::ostringstream log;
  TrainOptions options = SmallOptions();
  options.steps = 6;
  const TrainingSummary uninterrupted = Train(options, group, log);

  TemporaryDirectory directory;
  options.checkpoint_dir = directory.path();
  options.steps = 3;
  Train(options, group, log);
  ASSERT_TRUE(fs::exists(CheckpointPath(directory.path(), 3))) << log.str();
  options.steps = 6;
  options.resume = true;
  const TrainingSummary resumed = Train(options, group, log);

  EXPECT_EQ(resumed.first_step, 3);
  ASSERT_EQ(resumed.step_losses.size(), 3u) << log.str();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed.step_losses[i], uninterrupted.step_losses[3 + i]) << "step " << 4 + i;
  }
  EXPECT_EQ(resumed.validation_loss, uninterrupted.validation_loss);
  EXPECT_EQ(LatestCheckpoint(directory.path()), CheckpointPath(directory.path(), 6));
}

TEST(Gpt2Training, ResumeWithoutACheckpointStartsFresh) {
  OneRank group;
  std::ostringstream log;
  TemporaryDirectory directory;
  TrainOptions options = SmallOptions();
  options.steps = 1;
  options.checkpoint_dir = directory.path() + "/not_yet";
  options.resume = true;
  const TrainingSummary summary = Train(options, group, log);
  EXPECT_EQ(summary.first_step, 0);
  EXPECT_NE(log.str().find("starting fresh"), std::string::npos) << log.str();
}

TEST(Gpt2Training, CheckpointOfAnotherModelShapeIsRefusedNamingTheFlag) {
  OneRank group;
  std::ostringstream log;
  TemporaryDirectory directory;
  TrainOptions options = SmallOptions();
  options.steps = 1;
  options.checkpoint_dir = directory.path();
  Train(options, group, log);
  options.model.num_layers = 3;
  options.steps = 2;
  options.resume = true;
  try {
    Train(options, group, log);
    FAIL() << "a 2-layer checkpoint was loaded into a 3-layer model";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("--num_layers=2"), std::string::npos) << error.what();
  }
}

TEST(Gpt2Training, TruncatedCheckpointIsRefused) {
  OneRank group;
  std::ostringstream log;
  TemporaryDirectory directory;
  TrainOptions options = SmallOptions();
  options.steps = 1;
  options.checkpoint_dir = directory.path();
  Train(options, group, log);
  const std::string path = CheckpointPath(directory.path(), 1);
  fs::resize_file(path, fs::file_size(path) / 2);
  options.steps = 2;
  options.resume = true;
  EXPECT_THROW(Train(options, group, log), std::runtime_error);
}

TEST(Gpt2Training, MissingDataFileIsAnError) {
  OneRank group;
  std::ostringstream log;
  TrainOptions options = SmallOptions();
  options.train_data = "/nonexistent/train.bin";
  try {
    Train(options, group, log);
    FAIL() << "a missing file was accepted";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/train.bin"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace infini::examples::gpt2
