// Shrink and revoke on gloo with ranks that infini_run starts: a run of N
// processes loses its last rank (the process ends); the survivors revoke,
// shrink without it, and all-reduce on the new communicator
// (recovery_program.cc says what each rank does).
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <filesystem>
#include <string>

namespace {

struct RunResult {
  int exit_code = -1;
  std::string output;
};

RunResult RunWithRanks(int ranks) {
  char pattern[] = "/tmp/recovery_run_XXXXXX";
  const char* directory = mkdtemp(pattern);
  RunResult result;
  if (directory == nullptr) return result;
  const std::string command =
      "timeout 120 " + std::string(INFINI_RUN_PATH) + " --nproc_per_node=" + std::to_string(ranks) +
      " --ccl_backend=gloo -- " + RECOVERY_PROGRAM_PATH + " " + directory + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe != nullptr) {
    std::array<char, 512> buffer{};
    while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) result.output += buffer.data();
    const int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::filesystem::remove_all(directory);
  return result;
}

TEST(GlooRecoveryRun, SurvivorsOfALostLastProcessRevokeShrinkAndAllReduce) {
  for (int ranks : {2, 3}) {
    const RunResult run = RunWithRanks(ranks);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    const int last = ranks - 1;
    float sum = 0;
    for (int rank = 0; rank < last; ++rank) sum += static_cast<float>(rank);
    for (int rank = 0; rank < last; ++rank) {
      char expected[160];
      std::snprintf(expected, sizeof(expected),
                    "[rank%d]:rank %d: lost %d, now rank %d of %d, sum %g, pending recv "
                    "infiniCclRemoteError",
                    rank, rank, last, rank, last, sum);
      EXPECT_NE(run.output.find(expected), std::string::npos) << expected << "\n" << run.output;
    }
  }
}

}  // namespace
