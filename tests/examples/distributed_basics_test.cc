// examples/distributed_basics: the torch.distributed guide's section 3 in C++
// (init, all_reduce/broadcast/all_gather/barrier, new_group of {0, 1} and
// {2, 3}, destroy), run as 4 processes under infini_run on gloo. Every rank
// checks its results; the program never initializes glog itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "program_runner.h"

namespace {

using infini::examples::gpt2::testing::Result;
using infini::examples::gpt2::testing::RunCommand;
namespace fs = std::filesystem;

const std::string kProgram = DISTRIBUTED_BASICS_PATH;
const std::string kInfiniRun = INFINI_RUN_PATH;

TEST(DistributedBasics, FourRanksOnGlooGetEveryResultRight) {
  if (kInfiniRun.empty() || !fs::exists(kInfiniRun)) GTEST_SKIP() << "infini_run was not built";
  // INFINI_CCL_DEBUG=info: every rank logs through glog, which the program
  // never initialized.
  const Result result = RunCommand("INFINI_CCL_DEBUG=info " + kInfiniRun +
                                   " --ccl_backend=gloo --nproc_per_node=4 " + kProgram);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(result.output.find("distributed_basics: rank " + std::to_string(rank) +
                                 " of 4: all_reduce, broadcast, all_gather, barrier and "
                                 "new_group correct"),
              std::string::npos)
        << result.output;
  }
  // glog is initialized for a program that did not: no warning on every rank,
  // and the lines still reach stderr.
  EXPECT_NE(result.output.find("process group 'group_01' [0, 1]"), std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("Logging before InitGoogleLogging()"), std::string::npos)
      << result.output;
}

TEST(DistributedBasics, AnotherWorldSizeIsOneLineAndExitTwo) {
  if (kInfiniRun.empty() || !fs::exists(kInfiniRun)) GTEST_SKIP() << "infini_run was not built";
  const Result result =
      RunCommand(kInfiniRun + " --ccl_backend=gloo --nproc_per_node=2 " + kProgram);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("distributed_basics: world size 2: expected 4 ranks (infini_run "
                               "--nproc_per_node=4)"),
            std::string::npos)
      << result.output;
}

}  // namespace
