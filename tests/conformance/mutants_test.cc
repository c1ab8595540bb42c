// The conformance suite's own tests: plugins that lie in one way each (the
// liar over gloo, INFINI_CCL_LIE; kvtest, KVTEST_FAULT) must each get a FAIL
// from `ccl_conformance --quick` in every layout where the lie can show,
// and the real gloo plugin passes everything (conformance_run_test.cc). A
// hole found later in the suite becomes a new row here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "conformance_runner.h"

namespace {

using infini::conformance_test::Conformance;
using infini::conformance_test::Row;
using infini::conformance_test::Rows;
using infini::conformance_test::RunResult;

struct Mutant {
  const char* plugin;  // a path
  const char* environment;
  const char* lie;   // what it does, for the failure message
  int fewest_ranks;  // the smallest world in which the lie can show
  // For a lie that shows as a hang: a shorter wait than --quick's 20 s per
  // item, so the hang is judged sooner.
  const char* suite_flags = "";
};

struct Layout {
  int processes;
  int threads;
};

// What each mutant does is said in liar_plugin.cc and kvtest_plugin.cc.
const Mutant kMutants[] = {
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=all_gather_reversed", "all_gather blocks reversed", 2},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=avg_as_sum", "average computed as sum", 2},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=unwritten_output", "output never written", 1},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=in_place_ignored", "in-place all_reduce does nothing", 2},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=odd_count_short", "odd counts lose their last element", 1},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=large_message_corrupt", "wrong above 1 MiB", 1},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=broadcast_root_zero", "root 0 broadcasts the last's", 2},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=reduce_off_by_one_at_root_zero", "reduce wrong at root 0",
     1},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=bf16_max_ulp", "bfloat16 max one ulp off", 1},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=fp32_sum_in_bf16", "float32 sums in bfloat16 precision", 1},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=write_past_end", "writes past the output's end", 1},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=send_modified", "changes an out-of-place send buffer", 1},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=early_event", "events say done before the data", 1},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=abort_hides_error", "an aborted recv reports success", 2},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=async_error_silent", "async error always 'no error'", 1},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=split_ignores_key", "comm_split ignores the key", 3},
    {LIAR_PLUGIN_PATH, "INFINI_CCL_LIE=crash_on_bfloat16", "crashes in a bfloat16 sum", 1},
    // Its ring of sends and receives waits for a message taken by another
    // receive: the item's timeout is what catches it.
    {KVTEST_PLUGIN_PATH, "KVTEST_FAULT=recv_any_source", "recv takes any peer's message", 3,
     "--item_timeout_s=5"},
    {KVTEST_PLUGIN_PATH, "KVTEST_FAULT=shrink_rotates_ranks", "shrink numbers survivors wrong", 3},
};

const Layout kLayouts[] = {{2, 1}, {1, 2}, {2, 2}, {4, 1}};

std::string LayoutName(const Layout& layout) {
  return std::to_string(layout.processes) + "x" + std::to_string(layout.threads);
}

class MutantTest : public testing::TestWithParam<Mutant> {};

TEST_P(MutantTest, FailsInEveryLayoutWhereItsLieCanShow) {
  const Mutant& mutant = GetParam();
  int judged = 0;
  for (const Layout& layout : kLayouts) {
    if (layout.processes * layout.threads < mutant.fewest_ranks) continue;
    ++judged;
    const RunResult run =
        Conformance(mutant.plugin, "--nproc_per_node=" + std::to_string(layout.processes),
                    "--fail_fast --nthread_per_process=" + std::to_string(layout.threads) + " " +
                        mutant.suite_flags,
                    mutant.environment);
    std::string caught_by;
    for (const Row& row : Rows(run.output)) {
      if (row.verdict == "FAIL") caught_by = row.name + ":" + row.detail;
    }
    // 1, or the launcher's 128 + signal for a plugin that crashed.
    EXPECT_NE(run.exit_code, 0) << mutant.lie << " in " << LayoutName(layout) << "\n" << run.output;
    EXPECT_FALSE(caught_by.empty())
        << mutant.lie << " (" << mutant.environment << ") passed in " << LayoutName(layout) << "\n"
        << run.output;
    // Which item caught it, for the record (ctest --verbose shows it).
    std::printf("%s in %s: caught by %s\n", mutant.environment, LayoutName(layout).c_str(),
                caught_by.c_str());
  }
  EXPECT_GT(judged, 0);
}

// "INFINI_CCL_LIE=early_event" -> "EarlyEvent": gtest names take letters
// and digits only.
std::string MutantName(const testing::TestParamInfo<Mutant>& info) {
  const std::string lie =
      std::string(info.param.environment).substr(std::string(info.param.environment).find('=') + 1);
  std::string name;
  bool word_start = true;
  for (char c : lie) {
    if (c == '_') {
      word_start = true;
      continue;
    }
    name += word_start ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    word_start = false;
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Conformance, MutantTest, testing::ValuesIn(kMutants), MutantName);

// Under infini_run --max_restarts the suite goes on after a crash: the item
// that crashed is FAIL, the items after it are judged, the summary is
// printed, and the file that carried the rows across the restart is gone.
TEST(CrashingPlugin, IsAFailAndUnderRestartsTheRunGoesOnToItsSummary) {
  char directory[] = "/tmp/ccl_conformance_resume.XXXXXX";
  ASSERT_NE(mkdtemp(directory), nullptr);
  const RunResult run =
      Conformance(LIAR_PLUGIN_PATH, "--nproc_per_node=2 --max_restarts=1", "--filter=bfloat16",
                  std::string("TMPDIR=") + directory + " INFINI_CCL_LIE=crash_on_bfloat16");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const std::vector<Row> rows = Rows(run.output);
  const auto verdict_of = [&](const std::string& name) -> std::string {
    for (const Row& row : rows) {
      if (row.name == name) return row.verdict + row.detail;
    }
    return "<absent>";
  };
  EXPECT_EQ(verdict_of("all_reduce/bfloat16/sum").rfind("FAIL", 0), 0u) << run.output;
  EXPECT_NE(verdict_of("all_reduce/bfloat16/sum").find("crashed"), std::string::npos);
  EXPECT_EQ(verdict_of("all_reduce/bfloat16/max").rfind("pass", 0), 0u) << run.output;
  EXPECT_EQ(verdict_of("scatter/bfloat16").rfind("pass", 0), 0u) << run.output;
  EXPECT_NE(run.output.find("summary: "), std::string::npos) << run.output;
  EXPECT_EQ(rmdir(directory), 0) << "a file was left in " << directory;
}

}  // namespace
