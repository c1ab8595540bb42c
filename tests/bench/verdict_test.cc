// The verdict per line (the link table) and --expect's comparison with a
// saved run, ours or nccl-tests'.
#include "verdict.h"

#include <gtest/gtest.h>

#include <string>

namespace infini::bench {
namespace {

TableRow Row(int64_t bytes, double busbw_GBps) {
  TableRow row;
  row.bytes = bytes;
  row.busbw_GBps = busbw_GBps;
  return row;
}

TEST(Verdict, H200LinesAreJudgedAgainstWhatNcclReaches) {
  const LinkProfile link = *ChooseLink("h200_nvlink", kDLCUDA, "NVIDIA", "nccl", 1);
  constexpr int64_t kGiB = int64_t{1} << 30;
  TableRow row = Row(kGiB, 470);
  JudgeRow(link, Collective::kAllReduce, 8, &row);
  EXPECT_EQ(row.verdict, "healthy");
  EXPECT_NEAR(row.peak_percent, 470.0 / 450 * 100, 1e-9) << "NVLS: busbw above the wire's";
  row = Row(kGiB, 350);  // < 0.8 × 480 for all_reduce on 8
  JudgeRow(link, Collective::kAllReduce, 8, &row);
  EXPECT_EQ(row.verdict, "LOW");
  row = Row(kGiB, 350);  // ≥ 0.8 × 370 for the others, and all_reduce on 2
  JudgeRow(link, Collective::kAllGather, 8, &row);
  EXPECT_EQ(row.verdict, "healthy");
  JudgeRow(link, Collective::kAllReduce, 2, &row);
  EXPECT_EQ(row.verdict, "healthy");
  const LinkProfile without_nvls = *ChooseLink("h200_nvlink", kDLCUDA, "NVIDIA", "nccl", 1, true);
  row = Row(kGiB, 350);  // NCCL_NVLS_ENABLE=0: all_reduce is judged as the others
  JudgeRow(without_nvls, Collective::kAllReduce, 8, &row);
  EXPECT_EQ(row.verdict, "healthy");
  row = Row(int64_t{1} << 20, 10);
  JudgeRow(link, Collective::kAllReduce, 8, &row);
  EXPECT_EQ(row.verdict, "latency");
}

TEST(Verdict, AutoPicksByBackendAndLayoutAndNamesTheChoices) {
  EXPECT_EQ(ChooseLink("auto", kDLCPU, "host", "gloo", 1)->name, "loopback_tcp");
  EXPECT_EQ(ChooseLink("auto", kDLCUDA, "NVIDIA", "nccl", 1)->name, "h200_nvlink");
  EXPECT_FALSE(ChooseLink("auto", kDLCUDA, "NVIDIA", "nccl", 2).has_value()) << "between nodes";
  EXPECT_FALSE(ChooseLink("none", kDLCPU, "host", "gloo", 1).has_value());
  EXPECT_EQ(ChooseLink("pcie5_x16", kDLCPU, "host", "gloo", 4)->peak_GBps, 63);
  try {
    ChooseLink("nvlink5", kDLCUDA, "NVIDIA", "nccl", 1);
    FAIL() << "nvlink5 was accepted";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("--link='nvlink5': expected auto, none, h200_nvlink"),
              std::string::npos)
        << error.what();
  }
}

// loopback_tcp's figures were measured with gloo: another host backend
// (oneCCL over shared memory, a vendor's CPU plugin) is not judged against
// them, and the title line says why; a named --link still applies.
TEST(Verdict, AutoJudgesOnlyGlooAgainstGloosLoopbackFigure) {
  EXPECT_EQ(ChooseLink("auto", kDLCPU, "host", "gloo", 1)->name, "loopback_tcp");
  for (const char* backend : {"oneccl", "mock"}) {
    EXPECT_FALSE(ChooseLink("auto", kDLCPU, "host", backend, 1).has_value()) << backend;
    EXPECT_EQ(AutoHasNoVerdict("auto", kDLCPU, backend, 1),
              std::string("no verdict: the table's host figure (loopback_tcp) is gloo's, and "
                          "backend '") +
                  backend +
                  "' reports no link it can be judged against; --link=NAME names a profile");
  }
  EXPECT_EQ(ChooseLink("loopback_tcp", kDLCPU, "host", "oneccl", 1)->name, "loopback_tcp");
  EXPECT_EQ(AutoHasNoVerdict("none", kDLCPU, "oneccl", 1), "");
  EXPECT_EQ(AutoHasNoVerdict("auto", kDLCPU, "gloo", 2),
            "no verdict: the link between nodes is not in the table");
}

// One rank crosses no link (all_reduce's busbw is 0 by definition): not
// judged, whatever the size or the collective.
TEST(Verdict, ACaseOfOneRankIsNotJudged) {
  const LinkProfile link = *ChooseLink("h200_nvlink", kDLCUDA, "NVIDIA", "nccl", 1);
  for (Collective collective : {Collective::kAllReduce, Collective::kBroadcast}) {
    TableRow row = Row(int64_t{1} << 30, collective == Collective::kBroadcast ? 900 : 0);
    JudgeRow(link, collective, 1, &row);
    EXPECT_EQ(row.verdict, "n/a");
    EXPECT_EQ(row.peak_percent, 0);
  }
}

TEST(Verdict, AutoTakesTheLinkThePluginReportsOverTheTable) {
  // An H100-like PCIe card: the table's NVLink profile would be wrong.
  const auto pcie4 = ChooseLink("auto", kDLCUDA, "NVIDIA", "nccl", 1, false,
                                ccl::LinkBandwidth{31.5, "PCIe gen4 x16"});
  ASSERT_TRUE(pcie4.has_value());
  EXPECT_EQ(pcie4->name, "reported");
  EXPECT_DOUBLE_EQ(pcie4->peak_GBps, 31.5);
  EXPECT_DOUBLE_EQ(pcie4->other_GBps, 40 * 31.5 / 63) << "scaled from pcie5_x16";
  EXPECT_NE(pcie4->what.find("PCIe gen4 x16 = 32 GB/s per direction, reported by the plugin"),
            std::string::npos)
      << pcie4->what;
  // NVLink 5 × 18: twice H200's peak, twice what NCCL reaches there.
  const auto nvlink5 = ChooseLink("auto", kDLCUDA, "NVIDIA", "nccl", 1, false,
                                  ccl::LinkBandwidth{900, "NVLink 5 x 18"});
  EXPECT_DOUBLE_EQ(nvlink5->all_reduce_GBps, 2 * 480);
  TableRow row = Row(int64_t{1} << 30, 700);  // healthy on H200, LOW against NVLink 5
  JudgeRow(*nvlink5, Collective::kAllReduce, 8, &row);
  EXPECT_EQ(row.verdict, "LOW");
  // Unknown, or no entry at all: the table, saying why.
  const auto unknown = ChooseLink("auto", kDLCUDA, "NVIDIA", "nccl", 1, false,
                                  ccl::LinkBandwidth{0, "unknown: libnvidia-ml.so.1 not found"});
  EXPECT_EQ(unknown->name, "h200_nvlink");
  EXPECT_NE(unknown->what.find("from the table: the plugin could not tell the link (unknown: "
                               "libnvidia-ml.so.1 not found)"),
            std::string::npos)
      << unknown->what;
  EXPECT_NE(ChooseLink("auto", kDLCPU, "host", "gloo", 1)->what.find("the plugin reports no link"),
            std::string::npos);
  // A --link named by the user is the table's, whatever the plugin says.
  EXPECT_EQ(ChooseLink("h200_nvlink", kDLCUDA, "NVIDIA", "nccl", 1, false,
                       ccl::LinkBandwidth{31.5, "PCIe gen4 x16"})
                ->peak_GBps,
            450);
}

TEST(Expectations, ASavedNcclTestsRunIsMatchedBySizeTypeAndOp) {
  const Expectations saved = Expectations::Load(BENCH_TEST_DATA_DIR "/nccl_tests_sample.json");
  TableRow row;
  row.bytes = 8;
  row.type = "float32";  // nccl-tests' "float"
  row.redop = "sum";
  row.time_us = 12.0;  // saved: 9.87 out of place
  saved.Compare(10, &row);
  EXPECT_TRUE(row.regressed);
  EXPECT_EQ(row.versus_saved, "+22%!");
  row.time_us = 10.0;
  row.regressed = false;
  saved.Compare(10, &row);
  EXPECT_FALSE(row.regressed);
  EXPECT_EQ(row.versus_saved, "+1%");
  row.in_place = true;  // saved: 9.54 in place
  saved.Compare(10, &row);
  EXPECT_EQ(row.versus_saved, "+5%");
  row.bytes = 32;
  saved.Compare(10, &row);
  EXPECT_EQ(row.versus_saved, "new");
}

TEST(Expectations, AFileWithoutResultsIsOneLineNamingIt) {
  EXPECT_THROW(Expectations::Load("/nonexistent/saved.json"), UsageError);
  try {
    Expectations::Load(BENCH_TEST_DATA_DIR "/nccl_tests_schema.json");
    FAIL() << "a schema was taken for a run";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("no results in it"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace infini::bench
