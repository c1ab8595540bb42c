// gpt2 when a node is lost, launchers on loopback, gloo:
// - an elastic run (--nnodes=1:2): node 1 is lost after a checkpoint; node 0
//   meets again alone, restarts gpt2 with --resume on a world of one rank,
//   and its losses from there are those of a run that lost nothing
//   (--total_batch_size keeps the global batch: one rank accumulates what
//   two computed);
// - a shrinking run (--on_failure=shrink, three nodes): node 2's launcher is
//   SIGKILLed, the others go on in place, a replacement node joins and is
//   admitted at a step boundary, and every step's loss is that of a run
//   that lost nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <thread>

#include "launcher_harness.h"
#include "program_runner.h"

namespace infini::launch::testing {
namespace {

namespace gpt2 = infini::examples::gpt2::testing;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kSteps = 12;
const std::string kGpt2 = GPT2_PATH;
const std::string kTrainingFlags =
    " --steps=" + std::to_string(kSteps) +
    " --micro_batch_size=2 --total_batch_size=128 --channels=32 --sequence_length=32 "
    "--val_batches=1";

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream stream(text);
  for (std::string word; stream >> word;) words.push_back(word);
  return words;
}

TEST(ElasticGpt2, ResumesFromItsCheckpointOnTheSmallerWorld) {
  const gpt2::Result reference = gpt2::RunCommand(kGpt2 + kTrainingFlags);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::vector<double> expected = gpt2::StepLosses(reference.output);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps)) << reference.output;

  TempDir checkpoints;
  const int port = FreePort();
  std::vector<std::string> node = {"--nnodes=1:2",
                                   "--nproc_per_node=1",
                                   "--ccl_backend=gloo",
                                   "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                                   "--rdzv_id=elastic-gpt2",
                                   "--rdzv_timeout=30",
                                   "--rdzv_conf=last_call_timeout=1,heartbeat_timeout=1",
                                   "--term_timeout=2",
                                   "--",
                                   kGpt2};
  for (const std::string& word :
       Words(kTrainingFlags +
             " --checkpoint_every=1 --resume --checkpoint_dir=" + checkpoints.path())) {
    node.push_back(word);
  }
  LauncherProcess node0(node);
  std::this_thread::sleep_for(milliseconds(300));  // binds the endpoint first
  LauncherProcess node1(node);
  const std::string second_checkpoint = checkpoints.path() + "/step_00000002.ckpt";
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (!std::filesystem::exists(second_checkpoint) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_TRUE(std::filesystem::exists(second_checkpoint));
  kill(node1.pid(), SIGKILL);
  node1.Wait();
  const LauncherResult survivor = node0.Wait(seconds(90));
  const std::string output = survivor.out + survivor.err;
  ASSERT_EQ(survivor.exit_code, 0) << output;
  EXPECT_NE(survivor.err.find("node 1 lost: its infini_run"), std::string::npos) << output;
  EXPECT_NE(survivor.err.find("round 1: node 0 of 1 (--nnodes=1:2), WORLD_SIZE=1"),
            std::string::npos)
      << output;
  // The restarted gpt2 says where it resumed; its losses from there on.
  const size_t resumed = survivor.out.find("resume: " + checkpoints.path() + "/step_");
  ASSERT_NE(resumed, std::string::npos) << output;
  const int resumed_step = std::stoi(survivor.out.substr(survivor.out.find("(step ", resumed) + 6));
  ASSERT_GE(resumed_step, 2) << output;
  ASSERT_LT(resumed_step, kSteps) << "node 1 was lost before the last step";
  gpt2::ExpectSameLosses(std::vector<double>(expected.begin() + resumed_step, expected.end()),
                         gpt2::StepLosses(survivor.out.substr(resumed)), output);
  EXPECT_TRUE(NoProcessLeft());
}

TEST(ShrinkGpt2, AReplacementNodeIsAdmittedAndEveryStepsLossIsKept) {
  constexpr int kShrinkSteps = 24;
  // 12 samples a step: 3 ranks × 2 × 2 accumulation, or 2 ranks × 3 × 2.
  const std::string flags = " --steps=" + std::to_string(kShrinkSteps) +
                            " --micro_batch_size=2 --total_batch_size=384 --channels=32 "
                            "--sequence_length=32 --val_every=0";
  const gpt2::Result reference = gpt2::RunCommand(kGpt2 + flags);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::vector<double> expected = gpt2::StepLosses(reference.output);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kShrinkSteps)) << reference.output;

  const int port = FreePort();
  const auto node = [&](int node_rank) {
    std::vector<std::string> arguments = {"--nnodes=3",
                                          "--node_rank=" + std::to_string(node_rank),
                                          "--nproc_per_node=1",
                                          "--ccl_backend=gloo",
                                          "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                                          "--rdzv_id=shrink-gpt2",
                                          "--rdzv_timeout=30",
                                          "--rdzv_conf=heartbeat_timeout=1",
                                          "--on_failure=shrink",
                                          "--term_timeout=2",
                                          "--",
                                          kGpt2};
    for (const std::string& word : Words(flags)) arguments.push_back(word);
    return arguments;
  };
  // Steps slow enough for the loss and the join to happen mid-run.
  LaunchSetup slow_steps;
  slow_steps.extra_environment = {"INFINI_TEST_GPT2_STEP_DELAY_MS=100"};
  LauncherProcess node0(node(0), slow_steps);
  LauncherProcess node1(node(1), slow_steps);
  auto node2 = std::make_unique<LauncherProcess>(node(2), slow_steps);
  ASSERT_TRUE(node0.WaitForOutput("step    3/")) << node0.OutputSoFar();
  kill(node2->pid(), SIGKILL);
  node2->Wait();
  // The slot is free once node 0 has published the loss.
  ASSERT_TRUE(node0.WaitForOutput("published as lost")) << node0.OutputSoFar();
  LauncherProcess replacement(node(2), slow_steps);
  const LauncherResult joined = replacement.Wait(seconds(60));
  const LauncherResult first = node0.Wait(seconds(60));
  const LauncherResult second = node1.Wait(seconds(60));
  const std::string output = first.out + first.err + "\n---- node 1:\n" + second.err +
                             "\n---- replacement:\n" + joined.out + joined.err;
  EXPECT_EQ(first.exit_code, 0) << output;
  EXPECT_EQ(second.exit_code, 0) << output;
  EXPECT_EQ(joined.exit_code, 0) << output;
  EXPECT_THAT(first.out,
              ::testing::MatchesRegex("(.|\n)*lost rank\\(s\\) 2 at step [0-9]+; world now 2 ranks "
                                      "\\(dp=2\\)(.|\n)*"))
      << output;
  EXPECT_THAT(first.out, ::testing::MatchesRegex(
                             "(.|\n)*admitted rank\\(s\\) 3 after step [0-9]+; world now 3 "
                             "ranks \\(dp=3\\)(.|\n)*"))
      << output;
  // Rank 0 prints each step once, after any redo: all of them, as if
  // nothing had happened.
  gpt2::ExpectSameLosses(expected, gpt2::StepLosses(first.out), output);
  EXPECT_TRUE(NoProcessLeft());
}

}  // namespace
}  // namespace infini::launch::testing
