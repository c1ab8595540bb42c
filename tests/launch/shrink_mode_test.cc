// infini_run --on_failure=shrink as real processes (docs/launcher.md,
// "In-place recovery"): the launcher side alone, with shell ranks; the
// ranks' recovery is tested in tests/parallel/shrink_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "infini/common/loss_notice.h"
#include "launcher_harness.h"

namespace infini::launch::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

LauncherResult RunShrink(int ranks, const std::string& script,
                         std::vector<std::string> flags = {}) {
  std::vector<std::string> arguments = {"--nproc_per_node=" + std::to_string(ranks),
                                        "--on_failure=shrink", "--term_timeout=2"};
  arguments.insert(arguments.end(), flags.begin(), flags.end());
  arguments.insert(arguments.end(), {"--", "/bin/sh", "-c", script});
  return RunLauncher(arguments, std::chrono::seconds(30));
}

TEST(ShrinkModeTest, OthersGoOnAfterARankIsKilledAndTheRunSucceedsNamingTheLoss) {
  const LauncherResult result = RunShrink(
      3,
      "if [ \"$RANK\" = 1 ]; then kill -9 $$; fi; sleep 1; echo finished $RANK $INFINI_ON_FAILURE");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("finished 0 shrink"));
  EXPECT_THAT(result.out, HasSubstr("finished 2 shrink"));
  EXPECT_THAT(result.err, HasSubstr("rank 1 (pid"));
  EXPECT_THAT(result.err,
              HasSubstr("was lost (killed by SIGKILL (exit status 137)); 2 ranks go on"));
  EXPECT_THAT(result.err, HasSubstr("loss summary"));
  EXPECT_THAT(result.err, HasSubstr("lost rank 1 (local rank 1"));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(ShrinkModeTest, TwoLossesOneAfterAnotherAreBothPublished) {
  const LauncherResult result = RunShrink(
      3,
      "if [ \"$RANK\" = 1 ]; then exit 5; fi; if [ \"$RANK\" = 2 ]; then sleep 0.5; kill -9 $$; fi;"
      " sleep 1.5; echo finished $RANK");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.err, HasSubstr("2 ranks go on"));
  EXPECT_THAT(result.err, HasSubstr("1 rank goes on"));
  EXPECT_THAT(result.err, HasSubstr("2 ranks lost"));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(ShrinkModeTest, FewerThanMinRanksStopsTheRunWithOneLine) {
  const LauncherResult result =
      RunShrink(3, "if [ \"$RANK\" = 1 ]; then kill -9 $$; fi; sleep 20", {"--min_ranks=3"});
  EXPECT_EQ(result.exit_code, 137) << result.err;
  EXPECT_THAT(result.err, HasSubstr("2 ranks left, fewer than --min_ranks=3; stopping every rank"));
  EXPECT_LT(result.elapsed, std::chrono::seconds(15));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(ShrinkModeTest, EveryRankFailingIsAFailedRun) {
  const LauncherResult result = RunShrink(2, "sleep 0.$RANK; exit 3");
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_THAT(result.err, HasSubstr("failure summary"));
  EXPECT_TRUE(NoProcessLeft());
}

// A stopped rank heartbeats no more: after the heartbeat timeout it is lost
// (and killed); a slow one that runs is not.
TEST(ShrinkModeTest, AStoppedRankIsLostButASlowOneIsNot) {
  const LauncherResult result = RunShrink(
      3,
      "if [ \"$RANK\" = 1 ]; then kill -STOP $$; fi; if [ \"$RANK\" = 2 ]; then sleep 2; fi;"
      " sleep 1; echo finished $RANK",
      {"--rdzv_conf=heartbeat_timeout=1"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.err, HasSubstr("rank 1 (pid"));
  EXPECT_THAT(result.err, HasSubstr("stopped by SIGSTOP"));
  EXPECT_THAT(result.err, Not(HasSubstr("rank 2 (pid")));
  EXPECT_THAT(result.out, HasSubstr("finished 2"));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(ShrinkModeTest, RefusesMinRanksWithoutShrinkAndShrinkWithRestarts) {
  LauncherResult result = RunLauncher({"--min_ranks=2", "--", "/bin/true"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err, HasSubstr("--min_ranks='2': expected --on_failure=shrink"));
  result = RunLauncher({"--on_failure=shrink", "--max_restarts=1", "--", "/bin/true"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err, HasSubstr("--max_restarts=1 with --on_failure=shrink"));
  result = RunLauncher({"--on_failure=grow", "--", "/bin/true"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err, HasSubstr("on_failure"));
}

TEST(LossNoticeTest, FormatAndParseAgree) {
  const loss_notice::LossNotice notice{{1, 4}, 1700000000123, "killed by SIGKILL\n(x)"};
  const auto parsed = loss_notice::Parse(loss_notice::Format(notice));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->global_ranks, (std::vector<int>{1, 4}));
  EXPECT_EQ(parsed->unix_ms, 1700000000123);
  EXPECT_EQ(parsed->how, "killed by SIGKILL (x)");
  EXPECT_FALSE(loss_notice::Parse("ranks= at_ms=1 how=x").has_value());
  EXPECT_FALSE(loss_notice::Parse("nonsense").has_value());
}

}  // namespace
}  // namespace infini::launch::testing
