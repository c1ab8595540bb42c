// Host-staged communicators as a user runs them: infini_run --ccl_backend=gloo
// --device_backend=<arena test device>, every rank on the one arena device,
// ccl_conformance --quick judging every collective, type and operator in
// place and out of place. The arena's memory is unreachable from the host
// and its streams run only when waited on, so a staged collective passes
// only if it moves the bytes with the device's copies, in stream order.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct RunResult {
  int exit_code = -1;
  std::string output;
};

RunResult RunCommand(const std::string& command) {
  RunResult result;
  FILE* pipe = popen(("timeout 120 " + command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t got = 0;
  while ((got = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), got);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// verdict by item name, from global rank 0's table.
std::vector<std::pair<std::string, std::string>> Rows(const std::string& output) {
  std::vector<std::pair<std::string, std::string>> rows;
  std::istringstream lines(output);
  bool in_table = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("[rank0]:", 0) != 0) continue;
    line = line.substr(8);
    if (line.rfind("ITEM ", 0) == 0) {
      in_table = true;
      continue;
    }
    if (!in_table || line.rfind("summary:", 0) == 0) {
      in_table = false;
      continue;
    }
    std::istringstream fields(line);
    std::string name, verdict;
    fields >> name >> verdict;
    rows.emplace_back(name, verdict);
  }
  return rows;
}

std::string VerdictOf(const std::vector<std::pair<std::string, std::string>>& rows,
                      const std::string& name) {
  for (const auto& [row, verdict] : rows) {
    if (row == name) return verdict;
  }
  return "<absent>";
}

void ExpectStagedConformancePasses(int processes) {
  const RunResult run = RunCommand(std::string(INFINI_RUN_PATH) +
                                   " --ccl_backend=gloo --device_backend=" + ARENA_PLUGIN_PATH +
                                   " --nproc_per_node=" + std::to_string(processes) + " -- " +
                                   CCL_CONFORMANCE_PATH + " --quick");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto rows = Rows(run.output);
  ASSERT_GT(rows.size(), 100u) << run.output;
  std::set<std::string> failed;
  for (const auto& [name, verdict] : rows) {
    if (verdict == "FAIL" || verdict == "missing") failed.insert(name + " " + verdict);
  }
  EXPECT_TRUE(failed.empty()) << failed.size() << " items, first: " << *failed.begin() << "\n"
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
}

TEST(StagedRun, ConformancePassesWithTwoRanksOnOneArenaDevice) { ExpectStagedConformancePasses(2); }

TEST(StagedRun, ConformancePassesWithFourRanksOnOneArenaDevice) {
  ExpectStagedConformancePasses(4);
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
