// ccl_bench as users run it: under infini_run, on the gloo backend, with
// tiny sizes and few iterations (these prove behaviour, not speed).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "json_schema_check.h"

namespace {

using infini::bench::testing::Json;

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

// A row of rank 0's table: "[rank0]:  8  2  float32  sum  -1  13.90  0.00  0.00  0" and
// the tail columns after it (i_min i_p50 i_p99 i_max).
struct TableRow {
  std::string rank_prefix;          // "[rank0]:"
  std::vector<std::string> fields;  // size count type redop root time algbw busbw #wrong i_...
};

std::vector<TableRow> TableRows(const std::string& output) {
  std::vector<TableRow> rows;
  std::istringstream stream(output);
  for (std::string line; std::getline(stream, line);) {
    const size_t colon = line.find("]:");
    if (line.rfind("[rank", 0) != 0 || colon == std::string::npos) continue;
    TableRow row{line.substr(0, colon + 2), {}};
    std::istringstream words(line.substr(colon + 2));
    for (std::string word; words >> word;) row.fields.push_back(word);
    if (row.fields.size() >= 9 && std::isdigit(static_cast<unsigned char>(row.fields[0][0]))) {
      rows.push_back(row);
    }
  }
  return rows;
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
  const std::vector<TableRow> rows = TableRows(run.output);
  ASSERT_EQ(rows.size(), 4u) << run.output;  // 8, 32, 128, 512 bytes
  const std::vector<std::string> sizes = {"8", "32", "128", "512"};
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].rank_prefix, "[rank0]:") << run.output;
    EXPECT_EQ(rows[i].fields[0], sizes[i]) << run.output;
    EXPECT_EQ(rows[i].fields[2], "float32") << run.output;
    EXPECT_EQ(rows[i].fields[3], "sum") << run.output;
    EXPECT_EQ(rows[i].fields[8], "0") << run.output;  // #wrong
  }
  EXPECT_EQ(LinesContaining(run.output, "4 ranks = 2 processes x 2 threads").size(), 1u)
      << run.output;
  EXPECT_TRUE(LinesContaining(run.output, "[rank1]").empty()) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "--check passed").size(), 1u) << run.output;
}

TEST(CclBenchRun, CheckPassesForEveryCollectiveOutOfPlace) {
  const RunResult run = RunCommand(Bench("--nproc_per_node=3",
                                         "--collectives=all --min_bytes=8 --max_bytes=200 "
                                         "--step_factor=5 --check"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(TableRows(run.output).size(), 7u * 3u) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "--check passed").size(), 1u) << run.output;
}

TEST(CclBenchRun, CheckPassesInPlaceWithBfloat16Max) {
  const RunResult run = RunCommand(Bench("--nproc_per_node=2",
                                         "--threads_per_process=2 --collectives=all --inplace "
                                         "--dtype=bfloat16 --op=max --min_bytes=64 --max_bytes=64 "
                                         "--check"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // sendrecv and all_to_all have no in-place form and are skipped, saying so.
  EXPECT_EQ(TableRows(run.output).size(), 5u) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "has no in-place form").size(), 2u) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "--check passed").size(), 1u) << run.output;
}

// The default: nccl-tests' timing and columns, bandwidths as plain GB/s.
TEST(CclBenchRun, DefaultTableHasNcclTestsColumnsInPlainNumbers) {
  const RunResult run = RunCommand(Bench("--nproc_per_node=2",
                                         "--collectives=all_reduce,broadcast,all_gather "
                                         "--min_bytes=8 --max_bytes=4K --step_factor=8"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "timing back_to_back, 2 launches").size(), 1u)
      << run.output;
  const std::vector<std::string> headers = LinesContaining(run.output, "#wrong");
  ASSERT_EQ(headers.size(), 3u) << run.output;  // one per collective
  for (const char* column : {"size", "count", "type", "redop", "root", "time", "algbw", "busbw"}) {
    EXPECT_NE(headers[0].find(column), std::string::npos) << column << ": " << headers[0];
  }
  const std::regex two_decimals("[0-9]+\\.[0-9][0-9]");
  const std::vector<TableRow> rows = TableRows(run.output);
  ASSERT_EQ(rows.size(), 3u * 4u) << run.output;  // 8, 64, 512, 4096 bytes
  for (const TableRow& row : rows) {
    for (size_t column : {5u, 6u, 7u}) {  // time, algbw, busbw
      EXPECT_TRUE(std::regex_match(row.fields[column], two_decimals))
          << row.fields[column] << " in " << run.output;
    }
    EXPECT_EQ(row.fields[8], "N/A") << "#wrong without --check";
  }
  // all_reduce: 8 B is 2 float32 elements, sum, no root; broadcast: root 0.
  EXPECT_EQ(rows[0].fields[1], "2");
  EXPECT_EQ(rows[0].fields[4], "-1");
  EXPECT_EQ(LinesContaining(run.output, "busbw_GBps=").size(), 0u) << run.output;
}

TEST(CclBenchRun, PerIterationTimingStaysAvailable) {
  const RunResult run = RunCommand(
      Bench("--nproc_per_node=2", "--timing=per_iteration --max_bytes=64 --step_factor=8 --check"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "timing per_iteration, 2 launches").size(), 1u)
      << run.output;
  EXPECT_EQ(TableRows(run.output).size(), 2u) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "--check passed").size(), 1u) << run.output;
}

#ifdef KVTEST_PLUGIN_PATH
// kvtest's KVTEST_FAULT=wrong_all_reduce corrupts one element of every
// all_reduce (element 2): --check must say so in the table and in the exit code.
TEST(CclBenchRun, CheckCatchesAWrongAllReduce) {
  const RunResult run = RunCommand(
      "env KVTEST_FAULT=wrong_all_reduce " + std::string(INFINI_RUN_PATH) +
      " --ccl_backend=" + KVTEST_PLUGIN_PATH + " --nproc_per_node=2 -- " + CCL_BENCH_PATH +
      " --iters=2 --warmup=1 --collectives=all_reduce --min_bytes=64 --max_bytes=512 "
      "--step_factor=8 --check");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const std::vector<TableRow> rows = TableRows(run.output);
  ASSERT_EQ(rows.size(), 2u) << run.output;  // 64 and 512 bytes
  for (const TableRow& row : rows) {
    EXPECT_EQ(row.fields[8], "2") << run.output;  // one wrong element per rank
  }
  // Rank 0's own line (infini_run's failure summary quotes it again, indented).
  const std::vector<std::string> verdicts = LinesContaining(run.output, "--check failed");
  EXPECT_EQ(std::count_if(verdicts.begin(), verdicts.end(),
                          [](const std::string& line) {
                            return line.rfind("[rank0]:ccl_bench: --check failed: 4 wrong", 0) == 0;
                          }),
            1)
      << run.output;
}

// -R 1 and -R 2 on a backend that has both kinds (kvtest): each case's
// buffers registered (windows collectively), results still right.
TEST(CclBenchRun, BothKindsOfRegistrationRunAndCheck) {
  for (const char* kind : {"1", "2"}) {
    const RunResult run =
        RunCommand(std::string(INFINI_RUN_PATH) + " --ccl_backend=" + KVTEST_PLUGIN_PATH +
                   " --nproc_per_node=2 -- " + CCL_BENCH_PATH +
                   " -n 2 -w 1 -b 64 -e 512 -f 8 -c 1 -R " + kind);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(TableRows(run.output).size(), 2u) << run.output;
    EXPECT_EQ(LinesContaining(run.output, "--check passed").size(), 1u) << run.output;
    EXPECT_EQ(LinesContaining(run.output, std::string("(-R ") + kind + ")").size(), 1u)
        << run.output;
  }
}
#endif

TEST(CclBenchRun, BadTimingIsOneLineAndExitCodeTwo) {
  const RunResult run = RunCommand(std::string(CCL_BENCH_PATH) + " --timing=fast");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  EXPECT_NE(run.output.find("--timing='fast': expected back_to_back or per_iteration"),
            std::string::npos)
      << run.output;
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

// nccl-tests' command line as its users type it, its JSON fitting nccl-tests'
// schema, and the tail latencies of every iteration in both.
TEST(CclBenchRun, NcclTestsCommandLineWritesItsJsonWithTailLatencies) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("ccl_bench_J_" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  const std::filesystem::path json = folder / "out.json";
  const RunResult run =
      RunCommand(std::string(INFINI_RUN_PATH) + " --ccl_backend=gloo --nproc_per_node=2 -- " +
                 CCL_BENCH_PATH + " -b 8 -e 64 -f 8 -n 4 -w 1 -c 1 -g 1 -J " + json.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<TableRow> rows = TableRows(run.output);
  ASSERT_EQ(rows.size(), 2u) << run.output;
  for (const TableRow& row : rows) {
    ASSERT_EQ(row.fields.size(), 15u) << run.output;  // + %peak verdict (loopback TCP)
    const double min = std::stod(row.fields[9]), p50 = std::stod(row.fields[10]);
    const double p99 = std::stod(row.fields[11]), max = std::stod(row.fields[12]);
    EXPECT_TRUE(0 < min && min <= p50 && p50 <= p99 && p99 <= max) << run.output;
  }
  EXPECT_EQ(LinesContaining(run.output, "# Writing JSON output to " + json.string()).size(), 1u)
      << run.output;
  const Json schema = infini::bench::testing::ParseJson(
      infini::bench::testing::ReadFile(BENCH_TEST_DATA_DIR "/nccl_tests_schema.json"));
  const std::string text = infini::bench::testing::ReadFile(json.string());
  const Json document = infini::bench::testing::ParseJson(text);
  std::string violations;
  for (const std::string& line : infini::bench::testing::SchemaViolations(schema, document)) {
    violations += line + "\n";
  }
  EXPECT_EQ(violations, "") << text;
  ASSERT_TRUE(document.contains("results")) << text;
  const Json& results = document.at("results");
  ASSERT_EQ(results.size(), 2u) << text;
  for (const Json& result : results) {
    EXPECT_EQ(result.at("out_of_place").at("nwrong"), 0) << text;
    ASSERT_TRUE(result.contains("out_of_place_per_iter")) << text;
    const Json& tails = result.at("out_of_place_per_iter");
    EXPECT_EQ(tails.at("times_us").size(), 4u) << text;  // -n 4
    EXPECT_LE(tails.at("min_us").get<double>(), tails.at("p50_us").get<double>()) << text;
    EXPECT_LE(tails.at("p99_us").get<double>(), tails.at("max_us").get<double>()) << text;
  }
  EXPECT_EQ(document.at("config").at("iterations"), 4) << text;
  std::filesystem::remove_all(folder);
}

// Rank 0's own line (infini_run's failure summary quotes it again, indented).
size_t RankZeroLines(const std::string& output, const std::string& needle) {
  size_t count = 0;
  for (const std::string& line : LinesContaining(output, needle)) {
    count += line.rfind("[rank0]:ccl_bench: ", 0) == 0 ? 1 : 0;
  }
  return count;
}

TEST(CclBenchRun, GraphReplayOnAHostBackendIsOneLineAndFails) {
  const RunResult run = RunCommand(Bench("--nproc_per_node=1", "-G 1 -e 8"));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_EQ(RankZeroLines(run.output, "graph replay needs a device backend"), 1u) << run.output;
}

TEST(CclBenchRun, RegistrationOnABackendWithoutItIsOneLineAndFails) {
  const RunResult run = RunCommand(Bench("--nproc_per_node=1", "-R 1 -e 8"));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_EQ(RankZeroLines(run.output, "offers no buffer registration"), 1u) << run.output;
  const RunResult window = RunCommand(Bench("--nproc_per_node=1", "-R 2 -e 8"));
  EXPECT_NE(window.exit_code, 0) << window.output;
  EXPECT_EQ(RankZeroLines(window.output, "offers no window registration"), 1u) << window.output;
}

TEST(CclBenchRun, UnknownNcclTestsFlagIsOneLineAndExitCodeTwo) {
  const RunResult run = RunCommand(std::string(CCL_BENCH_PATH) + " -q 1");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  EXPECT_NE(run.output.find("unknown flag '-q'"), std::string::npos) << run.output;
}

// --split and nccl-tests' NCCL_TESTS_SPLIT_MASK: 4 ranks as two groups of
// two, timed at once, a row per group naming its colour, in the JSON too.
TEST(CclBenchRun, SplitGroupsGetARowEachInTheTableAndTheJson) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("ccl_bench_split_" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  const std::filesystem::path json = folder / "split.json";
  const RunResult run =
      RunCommand("env NCCL_TESTS_SPLIT_MASK=0x1 " +
                 Bench("--nproc_per_node=4", "-b 64 -e 64 -c 1 -J " + json.string()));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(LinesContaining(run.output, "2 groups of 2 ranks").size(), 1u) << run.output;
  const std::vector<TableRow> rows = TableRows(run.output);
  ASSERT_EQ(rows.size(), 2u) << run.output;
  for (size_t group = 0; group < rows.size(); ++group) {
    ASSERT_EQ(rows[group].fields.size(), 16u) << run.output;
    EXPECT_EQ(rows[group].fields.back(), std::to_string(group)) << run.output;
    EXPECT_EQ(rows[group].fields[8], "0") << run.output;  // #wrong within the group
  }
  const Json document =
      infini::bench::testing::ParseJson(infini::bench::testing::ReadFile(json.string()));
  ASSERT_TRUE(document.contains("results"));
  ASSERT_EQ(document.at("results").size(), 2u);
  EXPECT_EQ(document.at("results").at(1).at("group"), 1);
  EXPECT_EQ(LinesContaining(run.output, "--check passed").size(), 1u) << run.output;
  std::filesystem::remove_all(folder);
}

TEST(CclBenchRun, UnequalSplitGroupsAreOneLine) {
  const RunResult run = RunCommand(Bench("--nproc_per_node=3", "-e 8 --split=%2"));
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_EQ(RankZeroLines(run.output, "makes groups of 2, 1 ranks"), 1u) << run.output;
}

// --expect: a saved run (here nccl-tests' form, impossibly fast) makes
// every line a regression, marked '!', said once, and exit code 1; the
// verdict columns are there on gloo (loopback TCP).
TEST(CclBenchRun, ExpectFlagsRegressionsAgainstASavedRun) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("ccl_bench_expect_" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  const std::filesystem::path saved = folder / "saved.json";
  std::ofstream(saved) << R"({"version":3,"results":[{"size":64,"count":16,"type":"float",)"
                       << R"("redop":"sum","root":"    -1","out_of_place":{"time":0.001,)"
                       << R"("alg_bw":1,"bus_bw":1,"nwrong":0},"in_place":null,)"
                       << R"("actual_iterations":2,"experiment_name":""}]})";
  const RunResult run =
      RunCommand(Bench("--nproc_per_node=2", "-b 64 -e 64 --expect=" + saved.string()));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const std::vector<TableRow> rows = TableRows(run.output);
  ASSERT_EQ(rows.size(), 1u) << run.output;
  ASSERT_EQ(rows[0].fields.size(), 16u) << run.output;  // + %peak verdict vs_saved
  EXPECT_EQ(rows[0].fields[14], "latency") << run.output;
  EXPECT_EQ(rows[0].fields[15].back(), '!') << run.output;
  EXPECT_EQ(RankZeroLines(run.output, "--expect: 1 line(s) slower than"), 1u) << run.output;
  std::filesystem::remove_all(folder);
}

}  // namespace
