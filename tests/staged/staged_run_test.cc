// Host-staged communicators as a user runs them: infini_run --ccl_backend=gloo
// --device_backend=<arena test device>, every rank on the one arena device,
// ccl_conformance --quick judging every collective, type and operator in
// place and out of place. The arena's memory is unreachable from the host
// and its streams run only when waited on, so a staged collective passes
// only if it moves the bytes with the device's copies, in stream order.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "../conformance/conformance_runner.h"

namespace {

using infini::conformance_test::Row;
using infini::conformance_test::Rows;
using infini::conformance_test::RunCommand;
using infini::conformance_test::RunResult;

std::string VerdictOf(const std::vector<Row>& rows, const std::string& name) {
  for (const Row& row : rows) {
    if (row.name == name) return row.verdict;
  }
  return "<absent>";
}

// `environment`: variables for the whole run (infini_run passes them on).
RunResult ExpectStagedConformancePasses(int processes, const std::string& environment) {
  const RunResult run = RunCommand("env " + environment + " " + INFINI_RUN_PATH +
                                   " --ccl_backend=gloo --device_backend=" + ARENA_PLUGIN_PATH +
                                   " --nproc_per_node=" + std::to_string(processes) + " -- " +
                                   CCL_CONFORMANCE_PATH + " --quick");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const auto rows = Rows(run.output);
  EXPECT_GT(rows.size(), 100u) << run.output;
  std::set<std::string> failed;
  for (const Row& row : rows) {
    if (row.verdict == "FAIL" || row.verdict == "missing")
      failed.insert(row.name + " " + row.verdict);
  }
  EXPECT_TRUE(failed.empty()) << failed.size()
                              << " items, first: " << (failed.empty() ? "" : *failed.begin())
                              << "\n"
                              << run.output;
  // Every kind of staging is judged, not skipped: chunked, whole, variable
  // blocks, rooted, point-to-point in groups, communicators split.
  for (const char* name :
       {"all_reduce/float32/sum", "all_reduce/bfloat16/max", "broadcast/int8", "reduce/float64/min",
        "all_gather/float16", "reduce_scatter/int32/sum", "all_to_all_v/int64",
        "send_recv_ring/float16", "split/permuted_keys", "barrier"}) {
    EXPECT_EQ(VerdictOf(rows, name), "pass") << name << "\n" << run.output;
  }
  // A host collective cannot be captured into a device graph: one line.
  EXPECT_EQ(VerdictOf(rows, "capture/replay_all_reduce"), "unsupported");
  return run;
}

// Ranks of one host meet in shared memory for all_reduce (required here:
// the run fails if they cannot), and a third arena device lets
// failure/peer_killed start a rank and SIGKILL it in the middle of an
// all_reduce: the survivors must fail, not wait forever.
TEST(StagedRun, ConformancePassesWithTwoRanksInSharedMemory) {
  const RunResult run =
      ExpectStagedConformancePasses(2, "INFINI_CCL_STAGED_SHM=1 ARENA_DEVICE_COUNT=3");
  EXPECT_EQ(VerdictOf(Rows(run.output), "failure/peer_killed"), "pass") << run.output;
}

// Through the transport (gloo's sockets), every rank on the same device.
TEST(StagedRun, ConformancePassesWithFourRanksThroughTheTransport) {
  ExpectStagedConformancePasses(4, "INFINI_CCL_STAGED_SHM=0");
}

TEST(StagedRun, ABadSharedMemorySettingIsOneLine) {
  const RunResult run = RunCommand(std::string("env INFINI_CCL_STAGED_SHM=yes ") + INFINI_RUN_PATH +
                                   " --ccl_backend=gloo --device_backend=" + ARENA_PLUGIN_PATH +
                                   " --nproc_per_node=2 -- " + CCL_CONFORMANCE_PATH +
                                   " --filter=all_reduce/float32/sum --fail_fast");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("INFINI_CCL_STAGED_SHM='yes': expected 0 (never share memory), 1 "
                            "(always) or nothing (when the ranks can)"),
            std::string::npos)
      << run.output;
}

TEST(StagedRun, CclInfoNamesTheStagedPair) {
  const RunResult run = RunCommand(std::string(CCL_INFO_PATH) +
                                   " --ccl_backend=gloo --device_backend=" + ARENA_PLUGIN_PATH);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("backend:      gloo+arena"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("device_sharing=yes"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("staged:"), std::string::npos) << run.output;
}

TEST(StagedRun, AHostBackendAsTheDeviceIsOneLine) {
  const RunResult run =
      RunCommand(std::string(CCL_INFO_PATH) + " --ccl_backend=gloo --device_backend=gloo");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.output,
            "ccl_info: INFINI_CCL_DEVICE_BACKEND='gloo' (--device_backend): a host backend, "
            "expected one whose buffers live on a device (nccl, or another accelerator plugin)\n");
}

}  // namespace
