// ccl_bench as users run it: under infini_run, on the gloo backend, with
// tiny sizes and few iterations (these prove behaviour, not speed).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell with a hang bound.
RunResult RunCommand(const std::string& command) {
  RunResult result;
  FILE* pipe = popen(("timeout 150 " + command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t got = 0;
  while ((got = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), got);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string Bench(const std::string& launcher_flags, const std::string& bench_flags) {
  return std::string(INFINI_RUN_PATH) + " --ccl_backend=gloo " + launcher_flags + " -- " +
         CCL_BENCH_PATH + " --iters=2 --warmup=1 " + bench_flags;
}

std::vector<std::string> LinesContaining(const std::string& text, const std::string& needle) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) {
    if (line.find(needle) != std::string::npos) lines.push_back(line);
  }
  return lines;
}

TEST(CclBenchRun, ReportsEachCaseOnceFromGlobalRankZeroWithThreadRanks) {
  const RunResult run = RunCommand(Bench("--nproc_per_node=2",
                                         "--threads_per_process=2 --collectives=all_reduce "
                                         "--min_bytes=8 --max_bytes=512 --check"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<std::string> rows = LinesContaining(run.output, "busbw_GBps=");
  ASSERT_EQ(rows.size(), 4u) << run.output;  // 8, 32, 128, 512 bytes
  for (const std::string& row : rows) {
    EXPECT_EQ(row.rfind("[rank0]:all_reduce/float32/sum/out_of_place/bytes:", 0), 0u) << row;
    EXPECT_NE(row.find("ranks=4 "), std::string::npos) << row;
    EXPECT_NE(row.find("threads:2"), std::string::npos) << row;
    EXPECT_NE(row.find("wrong=0"), std::string::npos) << row;
  }
  EXPECT_TRUE(LinesContaining(run.output, "[rank1]").empty()) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "--check passed").size(), 1u) << run.output;
}

TEST(CclBenchRun, CheckPassesForEveryCollectiveOutOfPlace) {
  const RunResult run = RunCommand(Bench("--nproc_per_node=3",
                                         "--collectives=all --min_bytes=8 --max_bytes=200 "
                                         "--step_factor=5 --check"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "busbw_GBps=").size(), 7u * 3u) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "--check passed").size(), 1u) << run.output;
}

TEST(CclBenchRun, CheckPassesInPlaceWithBfloat16Max) {
  const RunResult run = RunCommand(Bench("--nproc_per_node=2",
                                         "--threads_per_process=2 --collectives=all --inplace "
                                         "--dtype=bfloat16 --op=max --min_bytes=64 --max_bytes=64 "
                                         "--check"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // sendrecv and all_to_all have no in-place form and are skipped, saying so.
  EXPECT_EQ(LinesContaining(run.output, "busbw_GBps=").size(), 5u) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "has no in-place form").size(), 2u) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "--check passed").size(), 1u) << run.output;
}

TEST(CclBenchRun, WritesJsonOnGlobalRankZeroOnly) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("ccl_bench_json_" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  const std::filesystem::path json = folder / "bench.json";
  const RunResult run =
      RunCommand(Bench("--nproc_per_node=2", "--max_bytes=32 --benchmark_out=" + json.string()));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream file(json);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(LinesContaining(text, "\"run_name\"").size(), 2u) << text;
  EXPECT_EQ(LinesContaining(text, "\"busbw_GBps\"").size(), 2u) << text;
  EXPECT_EQ(text.back() == '\n' ? text[text.size() - 2] : text.back(), '}') << text;
  std::filesystem::remove_all(folder);
}

TEST(CclBenchRun, UnknownFlagGivesOneLineAndExitCodeTwo) {
  const RunResult run = RunCommand(std::string(CCL_BENCH_PATH) + " --no_such_flag=1");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  EXPECT_NE(run.output.find("'--no_such_flag'"), std::string::npos) << run.output;
}

TEST(CclBenchRun, AdaptiveIterationFlagsAreRefused) {
  const RunResult run = RunCommand(std::string(CCL_BENCH_PATH) + " --benchmark_min_time=0.5");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--iters"), std::string::npos) << run.output;
}

}  // namespace
