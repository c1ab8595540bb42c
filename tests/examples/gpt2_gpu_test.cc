// gpt2 on the NCCL backend (label "gpu"): gradients staged through device
// buffers must train exactly as on gloo, where they stay in host memory.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "program_runner.h"

namespace {

using namespace infini::examples::gpt2::testing;

// GPU builds are made on one machine and run on another (scripts/gpu_check.sh
// carries the build): find the programs beside this test in bin/, not at the
// paths of the machine that compiled it.
std::string BesideThisTest(const std::string& program) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / program).string();
}

const std::string kGpt2 = BesideThisTest("gpt2");
const std::string kInfiniRun = BesideThisTest("infini_run");
const std::string kSmallModel = " --steps=5 --channels=32 --sequence_length=32 --val_batches=1";

int VisibleGpus() {
  const Result result = RunCommand("nvidia-smi -L");
  if (result.exit_code != 0) return 0;
  int gpus = 0;
  for (size_t at = result.output.find("GPU "); at != std::string::npos;
       at = result.output.find("GPU ", at + 1)) {
    if (at == 0 || result.output[at - 1] == '\n') ++gpus;
  }
  return gpus;
}

TEST(Gpt2ProgramGpu, TwoRanksOnNcclTrainLikeOneRankWithTwiceTheMicroBatch) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const Result one = RunCommand(kGpt2 + " --micro_batch_size=4" + kSmallModel);
  const Result two = RunCommand(kInfiniRun + " --ccl_backend=nccl --nproc_per_node=2 " + kGpt2 +
                                " --micro_batch_size=2" + kSmallModel);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("2 ranks, backend nccl (cuda:0)"), std::string::npos) << two.output;
  ExpectSameLosses(StepLosses(one.output), StepLosses(two.output), two.output);
}

}  // namespace
