// The flight recorder's ring and its hang analysis, without processes: the
// records that the watchdog publishes are built here by a recorder and read
// back by AnalyseHang as the reporting rank would.
#include "flight_recorder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "infini/ccl/dtype.h"

namespace infini::parallel::internal {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNow = 1'000'000'000;  // microseconds; entries are older

std::string Line(int global_rank, const std::string& key, const std::string& name,
                 uint64_t sequence, const std::string& op, const std::string& state,
                 int64_t age_us) {
  return std::to_string(global_rank) + "\t" + key + "\t" + name + "\t" + std::to_string(sequence) +
         "\t" + op + "\tfloat32\t4\t" + state + "\t" + std::to_string(kNow - age_us) + "\t0\t0\n";
}

const std::string kWorld = "pg/world.0000/0";

// The published record stays small: per rank and group the newest entry,
// plus whatever is still in flight.
TEST(FlightRecorder, KeepsEachRanksNewestEntryPerGroupAndEveryEntryInFlight) {
  FlightRecorder& recorder = FlightRecorder::Instance();
  const uint32_t group = recorder.RegisterGroup("pg/ring_test.1/0", "ring_test", {40, 41});
  const uint64_t first = recorder.Record(group, 0, "all_reduce", ccl::dtype::kFloat32, 4, 40);
  recorder.Update(first, FlightState::kDone);
  const uint64_t second = recorder.Record(group, 1, "broadcast", ccl::dtype::kFloat32, 8, 40);
  recorder.Update(second, FlightState::kStarted);
  const std::string text = recorder.Serialize();
  EXPECT_THAT(text,
              HasSubstr("40\tpg/ring_test.1/0\tring_test\t1\tbroadcast\tfloat32\t8\tstarted"));
  EXPECT_EQ(text.find("40\tpg/ring_test.1/0\tring_test\t0\t"), std::string::npos)
      << "an older completed entry is not published: " << text;
  const uint64_t third = recorder.Record(group, 2, "barrier", ccl::dtype::kFloat32, 0, 40);
  recorder.Update(third, FlightState::kEnqueued);
  EXPECT_THAT(recorder.Serialize(),
              HasSubstr("40\tpg/ring_test.1/0\tring_test\t1\tbroadcast\tfloat32\t8\tstarted"))
      << "an older entry still in flight is published";
}

TEST(FlightRecorder, AnEntryOverwrittenByNewerOnesIsNoLongerUpdated) {
  FlightRecorder& recorder = FlightRecorder::Instance();
  const uint32_t group = recorder.RegisterGroup("pg/wrap_test.1/0", "wrap_test", {50});
  const uint64_t old = recorder.Record(group, 0, "all_reduce", ccl::dtype::kFloat32, 1, 50);
  for (size_t i = 1; i <= kFlightRecorderEntries; ++i) {
    recorder.Update(recorder.Record(group, i, "all_gather", ccl::dtype::kFloat32, 1, 50),
                    FlightState::kDone);
  }
  recorder.Update(old, FlightState::kFailed);  // its slot now holds another entry
  const std::string text = recorder.Serialize();
  EXPECT_THAT(text, HasSubstr("50\tpg/wrap_test.1/0\twrap_test\t" +
                              std::to_string(kFlightRecorderEntries) + "\tall_gather"));
  EXPECT_EQ(text.find("\tfailed\t"), std::string::npos) << text;
}

TEST(HangAnalysis, ARankOneCollectiveBehindIsNamedWithWhereItIsAndWhoWaits) {
  std::map<int, std::string> records = {
      {0, Line(0, kWorld, "world", 3, "all_reduce", "started", 5'000'000)},
      {1, Line(1, kWorld, "world", 2, "all_reduce", "done", 6'000'000) +
              Line(1, "pg/tp0.1/0", "tp0", 7, "all_gather", "started", 4'000'000)},
      {2, Line(2, kWorld, "world", 3, "all_reduce", "started", 5'100'000)}};
  const HangReport report = AnalyseHang(records, kWorld, "world", {0, 1, 2}, 1, kNow);
  EXPECT_EQ(report.behind_global_rank, 1);
  EXPECT_EQ(report.behind_proc_rank, 1);
  ASSERT_EQ(report.lines.size(), 3u);
  EXPECT_THAT(report.lines[1], HasSubstr("waiting: global ranks 0, 2 in all_reduce #3 (float32 "
                                         "x 4, started 5.0 s ago)"));
  EXPECT_THAT(report.lines[2],
              HasSubstr("behind: process rank 1 (global rank 1) on group 'world': last on this "
                        "group: all_reduce #2 (float32 x 4, done); newest: all_gather #7 "
                        "(float32 x 4, started 4.0 s ago) on group 'tp0'; the others are at #3"));
}

TEST(HangAnalysis, AMemberWhoseProcessPublishedNothingIsBehind) {
  std::map<int, std::string> records = {
      {0, Line(0, kWorld, "world", 1, "all_reduce", "started", 2'000'000)},
      {2, Line(2, kWorld, "world", 1, "all_reduce", "started", 2'000'000)}};
  const HangReport report = AnalyseHang(records, kWorld, "world", {0, 1, 2}, 1, kNow);
  EXPECT_EQ(report.behind_global_rank, 1);
  EXPECT_THAT(report.lines[0], HasSubstr("none from global ranks 1"));
  EXPECT_THAT(report.lines.back(),
              HasSubstr("behind: process rank 1 (global rank 1) on group 'world': no record"));
}

TEST(HangAnalysis, ThreadRanksMapToTheirProcessAndTheLowestSequenceIsBehind) {
  // 2 threads per process: ranks 2 and 3 are process 1.
  std::map<int, std::string> records = {
      {0, Line(0, kWorld, "world", 5, "barrier", "started", 1) +
              Line(1, kWorld, "world", 5, "barrier", "started", 1)},
      {1, Line(2, kWorld, "world", 4, "barrier", "done", 1) +
              Line(3, kWorld, "world", 3, "barrier", "done", 1)}};
  const HangReport report = AnalyseHang(records, kWorld, "world", {0, 1, 2, 3}, 2, kNow);
  EXPECT_EQ(report.behind_global_rank, 3);
  EXPECT_EQ(report.behind_proc_rank, 1);
}

TEST(HangAnalysis, EveryMemberAtTheSameCollectiveMeansNobodyIsBehind) {
  std::map<int, std::string> records = {
      {0, Line(0, kWorld, "world", 2, "all_reduce", "started", 1)},
      {1, Line(1, kWorld, "world", 2, "all_reduce", "started", 1)}};
  const HangReport report = AnalyseHang(records, kWorld, "world", {0, 1}, 1, kNow);
  EXPECT_EQ(report.behind_global_rank, -1);
  EXPECT_THAT(report.lines.back(), HasSubstr("no rank is behind"));
  for (const std::string& line : report.lines) {
    EXPECT_EQ(line.find("flight recorder: behind:"), std::string::npos) << line;
  }
}

TEST(HangAnalysis, MalformedLinesInARecordAreIgnored) {
  std::map<int, std::string> records = {
      {0, "garbage\n\t\t\n" + Line(0, kWorld, "world", 1, "all_reduce", "started", 1)},
      {1, "1\tpg/world.0000/0\tworld\tnot-a-number\tall_reduce\tfloat32\t4\tdone\t0\t0\t0\n"}};
  const HangReport report = AnalyseHang(records, kWorld, "world", {0, 1}, 1, kNow);
  EXPECT_EQ(report.behind_global_rank, 1);
  EXPECT_THAT(report.lines.back(), HasSubstr("no operation on this group yet"));
}

}  // namespace
}  // namespace infini::parallel::internal
