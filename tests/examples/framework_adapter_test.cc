// examples/framework_adapter: a framework's NCCL-shaped CclImpl on
// InfiniCCL, run the ways InfiniTrain runs (docs/adopting.md) under
// infini_run on gloo: 2 processes × 1 thread, 1 × 2 (CommInitAll, and
// GroupStart / CommInitRank / GroupEnd), 2 × 2. The program checks every
// collective's values and exits non-zero on a wrong one; the id travels
// through the run's store, so nothing is left in the working directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "program_runner.h"

namespace {

using infini::examples::gpt2::testing::Result;
using infini::examples::gpt2::testing::RunCommand;
using infini::examples::gpt2::testing::TemporaryDirectory;
namespace fs = std::filesystem;

const std::string kProgram = FRAMEWORK_ADAPTER_PATH;
const std::string kInfiniRun = INFINI_RUN_PATH;

bool CanLaunch() { return !kInfiniRun.empty() && fs::exists(kInfiniRun); }

// `command` run by a shell whose working directory is `directory`.
std::string InDirectory(const TemporaryDirectory& directory, const std::string& command) {
  return "sh -c 'cd " + directory.path() + " && " + command + "'";
}

// Runs `arguments` of infini_run in a fresh working directory and expects
// success with the program's summary, and the directory still empty.
void ExpectCorrect(const std::string& launcher_flags, const std::string& program_flags,
                   const std::string& summary) {
  TemporaryDirectory directory;
  fs::create_directories(directory.path());
  const Result result =
      RunCommand(InDirectory(directory, kInfiniRun + " --ccl_backend=gloo " + launcher_flags + " " +
                                            kProgram + " " + program_flags));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find(summary + ": all collectives correct"), std::string::npos)
      << result.output;
  EXPECT_TRUE(fs::is_empty(directory.path())) << "files left in the working directory";
}

TEST(FrameworkAdapter, TwoProcessesOfOneRankEach) {
  if (!CanLaunch()) GTEST_SKIP() << "infini_run was not built";
  ExpectCorrect(
      "--nproc_per_node=2", "",
      "2 ranks (2 processes x 1 threads), backend gloo, GroupStart/CommInitRank/GroupEnd");
}

TEST(FrameworkAdapter, OneProcessOfTwoThreadRanksThroughCommInitAll) {
  if (!CanLaunch()) GTEST_SKIP() << "infini_run was not built";
  ExpectCorrect("--nproc_per_node=1", "--nthread_per_process=2 --init=all",
                "2 ranks (1 processes x 2 threads), backend gloo, CommInitAll");
}

TEST(FrameworkAdapter, OneProcessOfTwoThreadRanksThroughAGroupOfCommInitRanks) {
  if (!CanLaunch()) GTEST_SKIP() << "infini_run was not built";
  ExpectCorrect(
      "--nproc_per_node=1", "--nthread_per_process=2 --init=group",
      "2 ranks (1 processes x 2 threads), backend gloo, GroupStart/CommInitRank/GroupEnd");
}

TEST(FrameworkAdapter, TwoProcessesOfTwoThreadRanksEach) {
  if (!CanLaunch()) GTEST_SKIP() << "infini_run was not built";
  ExpectCorrect(
      "--nproc_per_node=2", "--nthread_per_process=2",
      "4 ranks (2 processes x 2 threads), backend gloo, GroupStart/CommInitRank/GroupEnd");
}

TEST(FrameworkAdapter, CommunicatorsDestroyedBeforeExitToo) {
  if (!CanLaunch()) GTEST_SKIP() << "infini_run was not built";
  ExpectCorrect(
      "--nproc_per_node=2", "--nthread_per_process=2 --destroy=explicit",
      "4 ranks (2 processes x 2 threads), backend gloo, GroupStart/CommInitRank/GroupEnd");
}

TEST(FrameworkAdapter, RunsWithoutALauncher) {
  TemporaryDirectory directory;
  fs::create_directories(directory.path());
  const Result result = RunCommand(InDirectory(
      directory, "INFINI_CCL_BACKEND=gloo " + kProgram + " --nthread_per_process=3 --init=group"));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("3 ranks (1 processes x 3 threads)"), std::string::npos)
      << result.output;
  EXPECT_TRUE(fs::is_empty(directory.path()));
}

TEST(FrameworkAdapter, CommInitAllAcrossProcessesIsABadFlag) {
  if (!CanLaunch()) GTEST_SKIP() << "infini_run was not built";
  const Result result =
      RunCommand(kInfiniRun + " --ccl_backend=gloo --nproc_per_node=2 " + kProgram + " --init=all");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("--init=all: CommInitAll makes every rank in one process"),
            std::string::npos)
      << result.output;
}

}  // namespace
