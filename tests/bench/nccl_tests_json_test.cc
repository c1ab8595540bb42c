// ccl_bench's -J against nccl-tests' schema (tests/bench/nccl_tests_schema.json,
// taken from nccl-tests' writer), and the checker against nccl-tests' own
// output (tests/bench/nccl_tests_sample.json, in its writer's exact form).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "iteration_stats.h"
#include "json_schema_check.h"
#include "results_json.h"

namespace infini::bench {
namespace {

using testing::Json;
using testing::ParseJson;
using testing::ReadFile;
using testing::SchemaViolations;

Json Schema() { return ParseJson(ReadFile(BENCH_TEST_DATA_DIR "/nccl_tests_schema.json")); }

std::string Lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

JsonRun TwoRowRun() {
  JsonRun run;
  run.start_time = "2026-12-01 15:55:00";
  run.end_time = "2026-12-01 15:55:01";
  run.args = {"ccl_bench", "-b", "8", "-J", "x.json"};
  run.env = {"NCCL_DEBUG=WARN", "NAME=\"quoted\"\n"};
  run.backend = "gloo";
  run.world_size = 2;
  run.devices = {JsonDevice{0, 0, 0, "gloo"}};
  TableRow measured;
  measured.bytes = 8;
  measured.count = 2;
  measured.type = "float32";
  measured.redop = "sum";
  measured.time_us = 12.5;
  measured.wrong = 0;
  measured.launches = 3;
  measured.name = "all_reduce/float32/sum/out_of_place/bytes:8";
  measured.times_us = {10, 12, 15.5};
  measured.per_iteration = ComputeIterationStats(measured.times_us);
  TableRow in_place = measured;
  in_place.in_place = true;
  in_place.wrong = -1;
  in_place.cpu_time = true;
  in_place.per_iteration = {};
  run.rows = {measured, in_place};
  return run;
}

TEST(NcclTestsJson, NcclTestsOwnOutputFitsTheSchema) {
  const Json sample = ParseJson(ReadFile(BENCH_TEST_DATA_DIR "/nccl_tests_sample.json"));
  EXPECT_EQ(Lines(SchemaViolations(Schema(), sample)), "");
}

TEST(NcclTestsJson, TheCheckerCatchesAMissingKeyAndAWrongType) {
  Json sample = ParseJson(ReadFile(BENCH_TEST_DATA_DIR "/nccl_tests_sample.json"));
  sample.erase("results");
  sample["config"]["ngpus"] = "one";
  const std::string violations = Lines(SchemaViolations(Schema(), sample));
  EXPECT_NE(violations.find("$: no \"results\""), std::string::npos) << violations;
  EXPECT_NE(violations.find("$.config.ngpus: expected integer, got string"), std::string::npos)
      << violations;
}

TEST(NcclTestsJson, OursFitsNcclTestsSchemaWithItsKeysAndNesting) {
  const Json ours = ParseJson(FormatNcclTestsJson(TwoRowRun()));
  EXPECT_EQ(Lines(SchemaViolations(Schema(), ours)), "");
  ASSERT_EQ(ours.at("results").size(), 2u);
  const Json& first = ours.at("results").at(0);
  EXPECT_EQ(first.at("root"), "    -1");  // nccl-tests' "%6i"
  EXPECT_TRUE(first.at("in_place").is_null());
  EXPECT_EQ(first.at("out_of_place").at("time"), 12.5);
  ASSERT_TRUE(first.contains("out_of_place_per_iter"));
  const Json& tails = first.at("out_of_place_per_iter");
  EXPECT_EQ(tails.at("p50_us"), 12);
  EXPECT_EQ(tails.at("max_us"), 15.5);
  EXPECT_EQ(tails.at("times_us").size(), 3u);
  const Json& second = ours.at("results").at(1);
  EXPECT_TRUE(second.at("out_of_place").is_null());
  EXPECT_TRUE(second.at("in_place").contains("cpu_time")) << "-C names the time cpu_time";
  EXPECT_TRUE(second.at("in_place").at("nwrong").is_null());
  EXPECT_FALSE(second.contains("in_place_per_iter")) << "not measured: no key";
  EXPECT_EQ(ours.at("out_of_bounds").at("okay"), "true");
  EXPECT_EQ(ours.at("env").at(1), "NAME=\"quoted\"\n");
}

TEST(NcclTestsJson, EnvironmentLeavesOutTokens) {
  setenv("INFINI_RUN_TOKEN", "secret", 1);
  setenv("NCCL_ALGO", "Ring", 1);
  const std::vector<std::string> kept = RunEnvironment();
  EXPECT_EQ(std::count(kept.begin(), kept.end(), "NCCL_ALGO=Ring"), 1);
  for (const std::string& variable : kept) EXPECT_EQ(variable.find("TOKEN"), std::string::npos);
}

TEST(NcclTestsJson, NcclVersionCodeComesFromTheBackendsVersionText) {
  EXPECT_EQ(NcclVersionCode("NCCL 2.28.9, CUDA runtime 13.0"), 22809);
  EXPECT_EQ(NcclVersionCode("NCCL 2.19.3"), 21903);
  EXPECT_EQ(NcclVersionCode("gloo 0.5.0 (TCP transport)"), 0);
  EXPECT_EQ(NcclVersionCode("NCCL (unknown)"), 0);
}

TEST(IterationStats, NearestRankPercentilesAsNcclTests) {
  std::vector<double> times;
  for (int value = 100; value >= 1; --value) times.push_back(value);
  const IterationStats stats = ComputeIterationStats(times);
  EXPECT_EQ(stats.samples, 100);
  EXPECT_EQ(stats.min_us, 1);
  EXPECT_EQ(stats.max_us, 100);
  EXPECT_EQ(stats.p50_us, 51);  // sorted[n / 2]
  EXPECT_EQ(stats.p95_us, 95);
  EXPECT_EQ(stats.p99_us, 99);
  EXPECT_DOUBLE_EQ(stats.avg_us, 50.5);
  EXPECT_EQ(ComputeIterationStats({}).samples, 0);
  EXPECT_EQ(ComputeIterationStats({7}).p99_us, 7);
}

}  // namespace
}  // namespace infini::bench
