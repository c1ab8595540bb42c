// The real gpt2 program: alone, and as two ranks under infini_run on the
// gloo backend. Data parallelism must not change the mathematics: 2 ranks ×
// micro-batch m train exactly like 1 rank × micro-batch 2m on the same data.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "program_runner.h"

namespace {

using namespace infini::examples::gpt2::testing;
namespace fs = std::filesystem;

const std::string kGpt2 = GPT2_PATH;
const std::string kInfiniRun = INFINI_RUN_PATH;
const std::string kGlooPlugin = GLOO_PLUGIN_PATH;

// The small model keeps each run around a second on a busy 2-core machine.
const std::string kSmallModel = " --channels=32 --sequence_length=32 --val_batches=1";

bool CanLaunchOnGloo() {
  return !kInfiniRun.empty() && fs::exists(kInfiniRun) && !kGlooPlugin.empty() &&
         fs::exists(kGlooPlugin);
}

std::string TwoRanksOnGloo() {
  return kInfiniRun + " --ccl_backend=gloo --nproc_per_node=2 " + kGpt2;
}

TEST(Gpt2Program, BadFlagExitsWithCodeTwoAndOneLine) {
  for (const std::string flags :
       {"--micro_batch_size=0", "--no_such_flag", "--num_heads=5", "--resume"}) {
    const Result result = RunCommand(kGpt2 + " " + flags);
    EXPECT_EQ(result.exit_code, 2) << flags << "\n" << result.output;
    EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << flags << "\n"
                                                                               << result.output;
  }
}

// Every count flag has an upper bound, said in its one-line refusal with the
// flag, the value and the range, exit 2 (step counts stop at a billion:
// before, up to 2^40 was accepted).
TEST(Gpt2Program, CountsAboveTheirBoundAreOneLineNamingTheRange) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--num_iteration=1000000001",
       "--num_iteration='1000000001': expected an integer in [0, "
       "1000000000]"},
      {"--steps=1099511627776", "--steps='1099511627776': expected an integer in [0, 1000000000]"},
      {"--log_every=1000000001",
       "--log_every='1000000001': expected an integer in [1, "
       "1000000000]"},
      {"--checkpoint_every=1000000001", "expected an integer in [0, 1000000000]"},
      {"--val_loss_every=1000000001", "expected an integer in [0, 1000000000]"},
      {"--throughput_skip_steps=1000000001", "expected an integer in [0, 1000000000]"},
      {"--nthread_per_process=65", "--nthread_per_process='65': expected an integer in [1, 64]"},
      {"--total_batch_size=1099511627777", "expected an integer in [0, 1099511627776]"},
      {"--batch_size=1048577", "expected an integer in [1, 1048576]"},
  };
  for (const auto& [flag, message] : cases) {
    const Result result = RunCommand(kGpt2 + " " + flag);
    EXPECT_EQ(result.exit_code, 2) << flag << "\n" << result.output;
    EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << flag << "\n"
                                                                               << result.output;
    EXPECT_NE(result.output.find(message), std::string::npos) << flag << "\n" << result.output;
  }
}

// Rank threads that cannot be made (1 GiB stacks in 6 GiB of address space,
// enforced for root too): one line naming the thread and why, exit 1, the
// threads made stopped before they meet. Before: std::terminate, exit 134.
TEST(Gpt2Program, RankThreadsThatCannotBeMadeAreOneLineNotAnAbort) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve more address space than the limit here";
#else
  if (!CanLaunchOnGloo()) GTEST_SKIP() << "the gloo backend was not built";
  const Result result =
      RunCommand("bash -c 'ulimit -s 1048576 && ulimit -v 6291456 && exec " + kGpt2 +
                 " --ccl_backend=gloo --nthread_per_process=16 --steps=1" + kSmallModel + "'");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
  EXPECT_NE(result.output.find("gpt2: cannot start thread "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find(" of 16 for the rank threads (--nthread_per_process=16): Resource "
                               "temporarily unavailable"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("terminate called"), std::string::npos) << result.output;
#endif
}

#ifdef KVTEST_ONE_PLUGIN_PATH
// A thread layout on a backend that allows one rank per process is refused
// for the whole process: one line, not one per rank thread.
TEST(Gpt2Program, AOneRankPerProcessRefusalIsOneLineWhateverTheThreads) {
  const Result result = RunCommand(kGpt2 + " --ccl_backend=" + KVTEST_ONE_PLUGIN_PATH +
                                   " --nthread_per_process=4 --steps=1" + kSmallModel);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
  EXPECT_NE(result.output.find("--nthread_per_process=4: backend 'kvtest' allows one rank per "
                               "process"),
            std::string::npos)
      << result.output;
}
#endif

// A value holding a newline is echoed escaped: the error stays one line that
// names the flag and shows the value as "\n". (The shell keeps a newline
// inside single quotes.)
TEST(Gpt2Program, ValuesWithANewlineAreEchoedEscapedOnOneLine) {
  struct Case {
    std::string flag;  // passed inside single quotes
    std::string named;
    int exit_code;
  };
  const std::vector<Case> cases = {
      {"--micro_batch_size=2\nx", "--micro_batch_size='2\\nx'", 2},
      {"--learning_rate=1e-3\nx", "--learning_rate='1e-3\\nx'", 2},
      {"--dtype=float32\nx", "--dtype='float32\\nx'", 2},
      {"--shuffle=yes\nx", "--shuffle='yes\\nx'", 2},
      {"--no_such\nflag=1", "--no_such\\nflag", 2},
      {"--train_data=/nonexistent/a\nb.bin", "/nonexistent/a\\nb.bin", 1},
  };
  for (const Case& bad : cases) {
    const Result result = RunCommand(kGpt2 + " '" + bad.flag + "'");
    EXPECT_EQ(result.exit_code, bad.exit_code) << bad.flag << "\n" << result.output;
    EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << bad.flag << "\n"
                                                                               << result.output;
    EXPECT_NE(result.output.find(bad.named), std::string::npos) << bad.flag << "\n"
                                                                << result.output;
  }
}

TEST(Gpt2Program, MissingTrainDataIsOneLineAndExitCodeOne) {
  const Result result = RunCommand(kGpt2 + " --train_data=/nonexistent/x.bin");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("/nonexistent/x.bin"), std::string::npos) << result.output;
}

TEST(Gpt2Program, TrainsWithoutALauncher) {
  const Result result = RunCommand(kGpt2 + " --steps=3" + kSmallModel);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(StepLosses(result.output).size(), 3u) << result.output;
  EXPECT_NE(result.output.find("val loss"), std::string::npos) << result.output;
}

TEST(Gpt2Program, GradientAccumulationMatchesALargerMicroBatch) {
  const Result large = RunCommand(kGpt2 + " --steps=4 --micro_batch_size=4" + kSmallModel);
  const Result accumulated = RunCommand(
      kGpt2 + " --steps=4 --micro_batch_size=2 --gradient_accumulation_steps=2" + kSmallModel);
  ASSERT_EQ(large.exit_code, 0) << large.output;
  ASSERT_EQ(accumulated.exit_code, 0) << accumulated.output;
  ExpectSameLosses(StepLosses(large.output), StepLosses(accumulated.output), accumulated.output);
}

TEST(Gpt2Program, TotalBatchSizeSetsTheAccumulation) {
  // 256 tokens per step = 4 samples × 32 tokens × 2 micro-steps.
  const Result accumulated = RunCommand(
      kGpt2 + " --num_iteration=4 --batch_size=4 --gradient_accumulation_steps=2" + kSmallModel);
  const Result total =
      RunCommand(kGpt2 + " --num_iteration=4 --batch_size=4 --total_batch_size=256" + kSmallModel);
  ASSERT_EQ(accumulated.exit_code, 0) << accumulated.output;
  ASSERT_EQ(total.exit_code, 0) << total.output;
  EXPECT_NE(total.output.find("x 2 accumulation"), std::string::npos) << total.output;
  ExpectSameLosses(StepLosses(accumulated.output), StepLosses(total.output), total.output);
}

TEST(Gpt2Program, ReportsThroughputInOneParseableLine) {
  const Result result =
      RunCommand(kGpt2 + " --num_iteration=4 --throughput_skip_steps=1" + kSmallModel);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const ThroughputLine line = ParseThroughput(result.output);
  EXPECT_GT(line.tokens_per_s, 0.0) << result.output;
  EXPECT_EQ(line.tokens_per_s, line.per_gpu) << result.output;
  EXPECT_GT(line.step_ms, 0.0) << result.output;
  EXPECT_EQ(line.ranks, 1) << result.output;
  EXPECT_EQ(line.fields.at("dtype"), "float32");
  EXPECT_EQ(line.fields.at("place"), "host");
  EXPECT_EQ(line.fields.at("steps"), "3");  // 4 steps, the first left out
}

TEST(Gpt2Program, Bfloat16OnTheHostIsABadFlag) {
  const Result result = RunCommand(kGpt2 + " --dtype=bfloat16 --num_iteration=1" + kSmallModel);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("--dtype=bfloat16: expected a GPU backend"), std::string::npos)
      << result.output;
  EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
}

TEST(Gpt2Program, TwoRanksOnGlooTrainLikeOneRankWithTwiceTheMicroBatch) {
  if (!CanLaunchOnGloo()) GTEST_SKIP() << "infini_run or the gloo backend was not built";
  const Result one = RunCommand(kGpt2 + " --steps=5 --micro_batch_size=4" + kSmallModel);
  const Result two = RunCommand(TwoRanksOnGloo() + " --steps=5 --micro_batch_size=2" + kSmallModel);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("2 ranks, backend gloo"), std::string::npos) << two.output;
  ExpectSameLosses(StepLosses(one.output), StepLosses(two.output), two.output);
}

TEST(Gpt2Program, TwoThreadRanksOnGlooTrainLikeOneRankWithTwiceTheMicroBatch) {
  if (!CanLaunchOnGloo()) GTEST_SKIP() << "infini_run or the gloo backend was not built";
  const Result one = RunCommand(kGpt2 + " --num_iteration=4 --batch_size=4" + kSmallModel);
  const Result two =
      RunCommand(kInfiniRun + " --ccl_backend=gloo --nproc_per_node=1 " + kGpt2 +
                 " --nthread_per_process=2 --num_iteration=4 --batch_size=2" + kSmallModel);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("2 ranks, backend gloo"), std::string::npos) << two.output;
  const ThroughputLine line = ParseThroughput(two.output);
  EXPECT_EQ(line.ranks, 2) << two.output;
  EXPECT_EQ(line.fields.at("grad_sync"), "after_backward") << two.output;
  ExpectSameLosses(StepLosses(one.output), StepLosses(two.output), two.output);
}

TEST(Gpt2Program, CheckpointOfOneRankResumesOnTwoRanksWhereItStopped) {
  if (!CanLaunchOnGloo()) GTEST_SKIP() << "infini_run or the gloo backend was not built";
  const Result uninterrupted = RunCommand(kGpt2 + " --steps=6 --micro_batch_size=4" + kSmallModel);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  TemporaryDirectory directory;
  const std::string checkpoint = " --checkpoint_dir=" + directory.path();
  const Result first =
      RunCommand(kGpt2 + " --steps=3 --micro_batch_size=4" + kSmallModel + checkpoint);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const Result second = RunCommand(TwoRanksOnGloo() + " --steps=6 --micro_batch_size=2 --resume" +
                                   kSmallModel + checkpoint);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resume: "), std::string::npos) << second.output;
  const std::vector<double> all = StepLosses(uninterrupted.output);
  ExpectSameLosses(std::vector<double>(all.begin() + 3, all.end()), StepLosses(second.output),
                   second.output);
}

TEST(Gpt2Program, BadDataOnEveryRankEndsTheRunInsteadOfHanging) {
  if (!CanLaunchOnGloo()) GTEST_SKIP() << "infini_run or the gloo backend was not built";
  const Result result = RunCommand(TwoRanksOnGloo() + " --train_data=/nonexistent/x.bin");
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.exit_code, 124) << "timed out:\n" << result.output;
  EXPECT_NE(result.output.find("/nonexistent/x.bin"), std::string::npos) << result.output;
}

// --on_failure=shrink: the survivors of a SIGKILLed rank train on at the
// smaller DP size without a checkpoint, the same global batch split over
// fewer ranks, so their losses are those of one rank taking the whole
// global batch from the start (the reference of the 2-vs-1-rank test).
std::string ShrinkingRanksOnGloo(int ranks, const std::string& kills) {
  return "env INFINI_TEST_GPT2_KILL=" + kills + " " + kInfiniRun +
         " --ccl_backend=gloo --on_failure=shrink --term_timeout=2 --nproc_per_node=" +
         std::to_string(ranks) + " " + kGpt2;
}

bool NoGpt2Left() {
  for (int tries = 0; tries < 50; ++tries) {
    if (RunCommand("pgrep -u $(id -u) -x gpt2").output.empty()) return true;
    usleep(100 * 1000);
  }
  return false;
}

TEST(Gpt2Program, ShrinkAfterAKilledRankTrainsOnLikeOneRankWithTheWholeGlobalBatch) {
  if (!CanLaunchOnGloo()) GTEST_SKIP() << "infini_run or the gloo backend was not built";
  const Result reference = RunCommand(kGpt2 + " --steps=6 --micro_batch_size=6" + kSmallModel);
  const Result shrunk =
      RunCommand(ShrinkingRanksOnGloo(3, "1@3") + " --steps=6 --micro_batch_size=2" + kSmallModel);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  EXPECT_EQ(shrunk.exit_code, 0) << shrunk.output;
  EXPECT_NE(shrunk.output.find("lost rank(s) 1 at step 3; world now 2 ranks (dp=2); resuming at "
                               "step 3"),
            std::string::npos)
      << shrunk.output;
  EXPECT_NE(shrunk.output.find("lost rank 1 (local rank 1"), std::string::npos) << shrunk.output;
  ExpectSameLosses(StepLosses(reference.output), StepLosses(shrunk.output), shrunk.output);
  EXPECT_TRUE(NoGpt2Left());
}

TEST(Gpt2Program, ShrinkAfterTwoLossesOneAfterAnotherEndsOnOneRank) {
  if (!CanLaunchOnGloo()) GTEST_SKIP() << "infini_run or the gloo backend was not built";
  const Result reference = RunCommand(kGpt2 + " --steps=5 --micro_batch_size=6" + kSmallModel);
  const Result shrunk = RunCommand(ShrinkingRanksOnGloo(3, "1@2,0@4") +
                                   " --steps=5 --micro_batch_size=2" + kSmallModel);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  EXPECT_EQ(shrunk.exit_code, 0) << shrunk.output;
  EXPECT_NE(shrunk.output.find("lost rank(s) 1 at step 2; world now 2 ranks (dp=2)"),
            std::string::npos)
      << shrunk.output;
  // Rank 0 itself is lost: rank 2, renumbered 0, reports and finishes.
  EXPECT_NE(shrunk.output.find("lost rank(s) 0 at step 4; world now 1 ranks (dp=1); resuming at "
                               "step 4"),
            std::string::npos)
      << shrunk.output;
  ExpectSameLosses(StepLosses(reference.output), StepLosses(shrunk.output), shrunk.output);
  EXPECT_TRUE(NoGpt2Left());
}

}  // namespace
