// The world's arithmetic (infini/common/rank_layout.h) and the environment
// each rank gets (child_env.h): --dry_run prints exactly what a real start
// gives every rank. Real launchers and ranks for the latter.
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "infini/common/rank_layout.h"
#include "launcher_harness.h"

extern char** environ;

namespace infini::launch::testing {
namespace {

using ::testing::ElementsAre;

TEST(RankLayout, NumbersProcessesNodeByNodeAndThreadsWithinAProcess) {
  const RankLayout layout{/*nnodes=*/3, /*processes_per_node=*/4, /*node_rank=*/2,
                          /*threads_per_process=*/2};
  EXPECT_EQ(layout.process_world_size(), 12);
  EXPECT_EQ(layout.world_size(), 24);
  EXPECT_EQ(layout.ranks_per_node(), 8);
  EXPECT_EQ(layout.ProcessRank(1), 9);
  EXPECT_EQ(layout.GlobalRank(1, 1), 19);
  EXPECT_THAT(layout.ProcessRanksOfNode(), ElementsAre(8, 9, 10, 11));
  EXPECT_EQ(layout.NodeOfProcess(7), 1);
  EXPECT_EQ(layout.LocalOfProcess(7), 3);
  EXPECT_EQ(layout.OnNode(0).ProcessRank(3), 3);
  // The bound the parser checks: above INT_MAX without overflowing.
  EXPECT_EQ((RankLayout{1048576, 65536, 0, 1}.WideWorldSize()), int64_t{1} << 36);
}

// A replacement node's ranks follow every block given so far.
TEST(RankLayout, AReplacementNodeIsANodeAfterEveryOther) {
  const RankLayout joined = RankLayout::JoinedAfterEveryNode(/*process_world_size=*/12, 4);
  EXPECT_EQ(joined.nnodes, 3);
  EXPECT_EQ(joined.node_rank, 2);
  EXPECT_THAT(joined.ProcessRanksOfNode(), ElementsAre(8, 9, 10, 11));
}

std::string Unquoted(const std::string& value) {
  if (value.size() < 2 || value.front() != '\'' || value.back() != '\'') return value;
  std::string plain;
  const std::string inner = value.substr(1, value.size() - 2);
  for (size_t i = 0; i < inner.size(); ++i) {
    if (inner.compare(i, 4, "'\\''") == 0) {
      plain += '\'';
      i += 3;
    } else {
      plain += inner[i];
    }
  }
  return plain;
}

// --dry_run's variables, by global rank.
std::map<int, std::map<std::string, std::string>> DryRunVariables(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> ranks;
  int rank = -1;
  for (const std::string& line : Lines(out)) {
    if (line.rfind("rank ", 0) == 0) {
      rank = std::stoi(line.substr(5));
    } else if (rank >= 0 && line.rfind("  ", 0) == 0 && line.rfind("  command: ", 0) != 0) {
      const size_t equals = line.find('=');
      if (equals != std::string::npos) {
        ranks[rank][line.substr(2, equals - 2)] = Unquoted(line.substr(equals + 1));
      }
    }
  }
  return ranks;
}

// The trace folder reached the ranks only, set on the launcher itself after
// --dry_run had returned: it never showed.
TEST(RankEnvironment, DryRunShowsTheTraceFolderOfEveryRank) {
  TempDir dir;
  const std::string trace_dir = dir.path() + "/trace";
  const LauncherResult result = RunLauncher(
      {"--dry_run", "--nproc_per_node=2", "--trace_dir=" + trace_dir + "/", "--", ChildPath()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto ranks = DryRunVariables(result.out);
  ASSERT_EQ(ranks.size(), 2u) << result.out;
  for (const auto& [rank, variables] : ranks) {
    ASSERT_TRUE(variables.count("INFINI_CCL_TRACE_DIR")) << "rank " << rank << "\n" << result.out;
    EXPECT_EQ(variables.at("INFINI_CCL_TRACE_DIR"), trace_dir);
  }
  EXPECT_NE(access(trace_dir.c_str(), F_OK), 0) << "--dry_run made the folder";
}

// What a rank really gets is the launcher's environment with exactly the
// variables --dry_run printed for it set: nothing more, nothing less. Only
// MASTER_PORT differs (each start picks a free one) and the secret is
// printed as (secret).
TEST(RankEnvironment, EachRankGetsExactlyWhatDryRunPrinted) {
  TempDir dir;
  TempDir records;
  const std::vector<std::string> flags = {
      "--nproc_per_node=2", "--rdzv_endpoint=127.0.0.1:" + std::to_string(FreePort()),
      "--rdzv_id=same-env", "--trace_dir=" + dir.path() + "/trace",
      "--ccl_backend=gloo", "--device_backend=kvtest",
      "--role=trainer",     "--",
      ChildPath(),          "--dir=" + records.path()};
  std::vector<std::string> dry_flags = {"--dry_run"};
  dry_flags.insert(dry_flags.end(), flags.begin(), flags.end());
  const LauncherResult dry = RunLauncher(dry_flags);
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  const LauncherResult run = RunLauncher(flags);
  ASSERT_EQ(run.exit_code, 0) << run.err;

  // The launcher's own environment: the harness adds the mark and the secret.
  std::map<std::string, std::string> launcher;
  for (char** entry = environ; *entry; ++entry) {
    const std::string text = *entry;
    const size_t equals = text.find('=');
    if (equals != std::string::npos) launcher[text.substr(0, equals)] = text.substr(equals + 1);
  }
  launcher["INFINI_LAUNCH_TEST_MARK"] = TestMark();
  launcher["INFINI_RUN_TOKEN"] = TestToken();

  const auto printed = DryRunVariables(dry.out);
  ASSERT_EQ(printed.size(), 2u) << dry.out;
  for (const auto& [rank, variables] : printed) {
    std::map<std::string, std::string> expected = launcher;
    for (const auto& [name, value] : variables) expected[name] = value;
    expected["INFINI_RUN_TOKEN"] = TestToken();
    const std::map<std::string, std::string> got = RecordedEnvironment(records.path(), rank);
    ASSERT_TRUE(got.count("MASTER_PORT")) << "rank " << rank;
    expected["MASTER_PORT"] = got.at("MASTER_PORT");
    for (const auto& [name, value] : expected) {
      EXPECT_EQ(got.count(name) ? got.at(name) : "(unset)", value)
          << "rank " << rank << ": " << name << "\n--dry_run printed:\n"
          << dry.out;
    }
    for (const auto& [name, value] : got) {
      EXPECT_TRUE(expected.count(name))
          << "rank " << rank << " got " << name << "=" << value << ", which --dry_run never showed";
    }
  }
}

}  // namespace
}  // namespace infini::launch::testing
