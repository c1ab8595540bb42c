// Elastic runs (--nnodes=MIN:MAX, torchrun's dynamic rendezvous) end to end:
// real launchers on one machine, meeting through node 0's TCP store. A node
// lost while joining, running or finishing, a node arriving late, too few
// nodes left, and node 0's own loss: each checks the exit codes, the world
// the restarted ranks saw (their recorded WORLD_SIZE/RANK), that the loss is
// named on one line, and that no process is left.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "launcher_harness.h"

namespace infini::launch::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

size_t CountOccurrences(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

// One node of an elastic run: short timeouts so that each case takes seconds.
std::vector<std::string> ElasticNode(int port, const std::string& run_id, const std::string& nnodes,
                                     const TempDir& dir, const std::vector<std::string>& child,
                                     const std::string& extra_conf = "") {
  std::vector<std::string> arguments = {
      "--nnodes=" + nnodes,
      "--nproc_per_node=1",
      "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
      "--rdzv_id=" + run_id,
      "--rdzv_timeout=20",
      "--rdzv_conf=last_call_timeout=1,heartbeat_timeout=1" + extra_conf,
      "--term_timeout=2",
      "--",
      ChildPath(),
      "--dir=" + dir.path()};
  arguments.insert(arguments.end(), child.begin(), child.end());
  return arguments;
}

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

std::string HostNameForTest() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// Starts node 0 (the first launcher binds the endpoint and hosts the store),
// then the others.
std::vector<std::unique_ptr<LauncherProcess>> StartNodes(
    int count, const std::function<std::vector<std::string>()>& arguments) {
  std::vector<std::unique_ptr<LauncherProcess>> nodes;
  for (int node = 0; node < count; ++node) {
    nodes.push_back(std::make_unique<LauncherProcess>(arguments()));
    if (node == 0) std::this_thread::sleep_for(milliseconds(300));
  }
  return nodes;
}

// The world rank `rank` saw in `attempt`: WORLD_SIZE, GROUP_RANK, NNODES,
// TORCHELASTIC_RESTART_COUNT.
void ExpectWorld(const TempDir& dir, int rank, int attempt, int world_size) {
  auto env = RecordedEnvironment(dir.path(), rank, attempt);
  EXPECT_EQ(env["RANK"], std::to_string(rank)) << "attempt " << attempt;
  EXPECT_EQ(env["WORLD_SIZE"], std::to_string(world_size)) << "rank " << rank;
  EXPECT_EQ(env["NNODES"], std::to_string(world_size)) << "rank " << rank;
  EXPECT_EQ(env["GROUP_RANK"], std::to_string(rank)) << "one rank per node";
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], std::to_string(attempt)) << "rank " << rank;
}

TEST(ElasticLauncher, NodeLostWhileRunningLeavesTheOthersInASmallerWorld) {
  TempDir dir;
  const int port = FreePort();
  auto nodes = StartNodes(3, [&] {
    return ElasticNode(port, "lost-running", "2:3", dir,
                       {"--sleep_ms=60000", "--sleep_attempts=1"});
  });
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 3));
  for (int rank = 0; rank < 3; ++rank) ExpectWorld(dir, rank, 0, 3);
  kill(nodes[2]->pid(), SIGKILL);  // not node 0: it hosts the store
  LauncherResult survivors[] = {nodes[0]->Wait(seconds(30)), nodes[1]->Wait(seconds(30))};
  nodes[2]->Wait();
  for (const LauncherResult& result : survivors) {
    EXPECT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(CountOccurrences(result.err, "lost: its infini_run"), 1u) << result.err;
    EXPECT_THAT(result.err, HasSubstr("not counted against --max_restarts"));
  }
  for (int rank = 0; rank < 2; ++rank) ExpectWorld(dir, rank, 1, 2);
  EXPECT_FALSE(Exists(dir.path() + "/2.1.env")) << "the world shrank to two nodes";
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
  EXPECT_TRUE(NoProcessLeft());
}

// torchrun: membership changes are not failures against --max_restarts. A
// node lost (round 1), then a rank failing there: the one restart allowed
// is still left, and attempt 2 finishes.
TEST(ElasticLauncher, AMembershipChangeLeavesTheRestartsForFailures) {
  TempDir dir;
  const int port = FreePort();
  auto nodes = StartNodes(3, [&] {
    auto arguments = ElasticNode(port, "budget", "2:3", dir,
                                 {"--sleep_ms=60000", "--sleep_attempts=1", "--fail_rank=1",
                                  "--fail_from_attempt=1", "--fail_attempts=2", "--exit_code=5"});
    arguments.insert(arguments.begin(), "--max_restarts=1");
    return arguments;
  });
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 3));
  kill(nodes[2]->pid(), SIGKILL);
  LauncherResult survivors[] = {nodes[0]->Wait(seconds(40)), nodes[1]->Wait(seconds(40))};
  nodes[2]->Wait();
  for (const LauncherResult& result : survivors) {
    EXPECT_EQ(result.exit_code, 0) << result.err;
    EXPECT_THAT(result.err, HasSubstr("(restart 1 of 1)"));
  }
  for (int rank = 0; rank < 2; ++rank) ExpectWorld(dir, rank, 2, 2);
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
  EXPECT_TRUE(NoProcessLeft());
}

// A rank's own failure is a failure, elastic or not: once the grace for a
// node's loss (twice the heartbeat timeout) passed without one, every node
// stops with the failed rank's exit code (no --max_restarts).
TEST(ElasticLauncher, ARankFailureWithoutALostNodeStopsEveryNode) {
  TempDir dir;
  const int port = FreePort();
  auto nodes = StartNodes(2, [&] {
    return ElasticNode(
        port, "rank-failure", "2:3", dir,
        {"--fail_rank=1", "--exit_code=6", "--fail_after_ms=300", "--sleep_ms=60000"});
  });
  LauncherResult results[] = {nodes[0]->Wait(), nodes[1]->Wait()};
  for (const LauncherResult& result : results) EXPECT_EQ(result.exit_code, 6) << result.err;
  EXPECT_THAT(results[0].err, HasSubstr("node 1 failed: rank 1"));
  EXPECT_THAT(results[1].err, HasSubstr("first failure: rank 1"));
  for (const LauncherResult& result : results) {
    EXPECT_THAT(result.err, ::testing::Not(HasSubstr("meeting the other nodes again")));
  }
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(ElasticLauncher, LateNodeIsAdmittedAtTheRoundItTriggers) {
  TempDir dir;
  const int port = FreePort();
  auto arguments = [&] {
    return ElasticNode(port, "late", "2:3", dir, {"--sleep_ms=60000", "--sleep_attempts=1"});
  };
  auto nodes = StartNodes(2, arguments);
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 2));
  LauncherProcess late(arguments());
  LauncherResult results[] = {nodes[0]->Wait(), nodes[1]->Wait(), late.Wait()};
  for (const LauncherResult& result : results) EXPECT_EQ(result.exit_code, 0) << result.err;
  for (int node = 0; node < 2; ++node) {
    EXPECT_EQ(CountOccurrences(results[node].err, "a node arrived and waits to join round 1"), 1u)
        << results[node].err;
  }
  for (int rank = 0; rank < 2; ++rank) ExpectWorld(dir, rank, 0, 2);
  for (int rank = 0; rank < 3; ++rank) ExpectWorld(dir, rank, 1, 3);
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(ElasticLauncher, FewerThanMinNodesLeftStopsAtTheJoinTimeout) {
  TempDir dir;
  const int port = FreePort();
  auto nodes = StartNodes(2, [&] {
    return ElasticNode(port, "below-min", "2:3", dir, {"--sleep_ms=60000"}, ",join_timeout=2");
  });
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 2));
  kill(nodes[1]->pid(), SIGKILL);
  LauncherResult result = nodes[0]->Wait();
  nodes[1]->Wait();
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_EQ(CountOccurrences(result.err, "node 1 lost: its infini_run"), 1u) << result.err;
  EXPECT_THAT(result.err, HasSubstr("timed out after 2 s waiting for at least 2 nodes "
                                    "(--nnodes=2:3) in round 1: 1 arrived "
                                    "(--rdzv_conf=join_timeout)"));
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(ElasticLauncher, NodeLostWhileJoiningIsLeftOutOfTheNextRound) {
  TempDir dir;
  const int port = FreePort();
  // MAX 4 never arrive: round 0 closes last_call_timeout after MIN, by
  // which time node 2 is gone.
  auto nodes = StartNodes(
      3, [&] { return ElasticNode(port, "lost-joining", "2:4", dir, {}, ",last_call_timeout=2"); });
  std::this_thread::sleep_for(milliseconds(800));
  kill(nodes[2]->pid(), SIGKILL);
  LauncherResult survivors[] = {nodes[0]->Wait(), nodes[1]->Wait()};
  nodes[2]->Wait();
  for (const LauncherResult& result : survivors) {
    EXPECT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(CountOccurrences(result.err, " lost while joining round 0: not ready"), 1u)
        << result.err;
  }
  EXPECT_FALSE(Exists(dir.path() + "/0.0.env")) << "attempt 0 never started";
  for (int rank = 0; rank < 2; ++rank) ExpectWorld(dir, rank, 1, 2);
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(ElasticLauncher, NodeLostWhileTheOthersFinishEndsTheRunNamingIt) {
  TempDir dir;
  const int port = FreePort();
  auto nodes = StartNodes(3, [&] {
    return ElasticNode(port, "lost-finishing", "2:3", dir, {"--long_from=2", "--sleep_ms=60000"});
  });
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 3));
  int holder = -1;  // whose rank sleeps
  for (int node = 0; node < 3 && holder < 0; ++node) {
    if (FindRankPid(nodes[static_cast<size_t>(node)]->pid(), 2, seconds(2)) > 0) holder = node;
  }
  ASSERT_GT(holder, 0) << "rank 2 runs on a node other than node 0";
  kill(nodes[static_cast<size_t>(holder)]->pid(), SIGKILL);
  for (int node = 0; node < 3; ++node) {
    LauncherResult result = nodes[static_cast<size_t>(node)]->Wait();
    if (node == holder) continue;
    EXPECT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(CountOccurrences(result.err, "node 2 lost: its infini_run"), 1u) << result.err;
    EXPECT_THAT(result.err, HasSubstr("every other node's ranks had succeeded"));
  }
  EXPECT_FALSE(Exists(dir.path() + "/0.1.env")) << "nothing restarted";
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(ElasticLauncher, NodeZerosLossEndsARunOnItsTcpStoreInOneLine) {
  TempDir dir;
  const int port = FreePort();
  auto nodes = StartNodes(
      3, [&] { return ElasticNode(port, "lost-host", "2:3", dir, {"--sleep_ms=60000"}); });
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 3));
  kill(nodes[0]->pid(), SIGKILL);
  nodes[0]->Wait();
  for (int node = 1; node < 3; ++node) {
    LauncherResult result = nodes[static_cast<size_t>(node)]->Wait();
    EXPECT_EQ(result.exit_code, 1) << result.err;
    EXPECT_EQ(CountOccurrences(result.err,
                               "node 0 hosts the run's store (--rdzv_backend=c10d): its loss ends "
                               "the run; use --rdzv_backend=etcd to survive any node"),
              1u)
        << result.err;
  }
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
  EXPECT_TRUE(NoProcessLeft());
}

// A survivor's rank broken by a lost node (here: it fails after node 2's
// launcher stalls, before the heartbeat names the loss) is the membership
// change: one line and a new round, no failure summary (issue 34).
TEST(ElasticLauncher, ASurvivorPrintsNoFailureSummaryForAMembershipChange) {
  TempDir dir;
  const int port = FreePort();
  auto nodes = StartNodes(3, [&] {
    return ElasticNode(port, "no-summary", "2:3", dir,
                       {"--sleep_ms=60000", "--sleep_attempts=1", "--fail_rank=1",
                        "--fail_attempts=1", "--fail_after_ms=1000"});
  });
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 3));
  // Node ranks follow arrival: the node of rank 2 stalls (not killed: its
  // closed connection would name the loss at once), rank 1's fails.
  size_t stalled = 0;
  for (int tries = 0; stalled == 0 && tries < 100; ++tries) {
    for (size_t node : {1u, 2u}) {
      if (FindRankPid(nodes[node]->pid(), 2, milliseconds(1)) > 0) stalled = node;
    }
  }
  ASSERT_NE(stalled, 0u) << "rank 2 not found";
  const size_t failing = 3 - stalled;
  kill(nodes[stalled]->pid(), SIGSTOP);
  LauncherResult survivors[] = {nodes[0]->Wait(seconds(30)), nodes[failing]->Wait(seconds(30))};
  kill(nodes[stalled]->pid(), SIGKILL);
  nodes[stalled]->Wait();
  EXPECT_THAT(survivors[1].err, HasSubstr("rank 1 failing on purpose"));
  for (const LauncherResult& result : survivors) {
    EXPECT_EQ(result.exit_code, 0) << result.err;
    EXPECT_THAT(result.err, HasSubstr("meeting the other nodes again in round 1"));
    EXPECT_THAT(result.err, ::testing::Not(HasSubstr("failure summary"))) << result.err;
  }
  ExpectWorld(dir, 1, 1, 2);
  EXPECT_TRUE(NoProcessLeft());
}

// torchrun accepts --node_rank on an elastic run and ignores it.
TEST(ElasticLauncher, NodeRankIsAcceptedAndIgnoredWithOneLine) {
  TempDir dir;
  const int port = FreePort();
  auto arguments = ElasticNode(port, "node-rank", "1:2", dir, {});
  arguments.insert(arguments.begin(), "--node_rank=1");
  const LauncherResult result = RunLauncher(arguments);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(CountOccurrences(result.err,
                             "infini_run: --node_rank=1 is ignored with --nnodes=1:2: each round "
                             "numbers the nodes (as torchrun)\n"),
            1u)
      << result.err;
  ExpectWorld(dir, 0, 0, 1);
}

// A launcher in an open round says whom it has and what it waits for, after
// 5 s and every 30 s, instead of silence until join_timeout.
TEST(ElasticLauncher, AnOpenRoundSaysWhomItWaitsFor) {
  TempDir dir;
  const int port = FreePort();
  auto arguments = ElasticNode(port, "open-round", "2:3", dir, {});
  *std::find(arguments.begin(), arguments.end(), "--rdzv_timeout=20") = "--rdzv_timeout=6";
  LauncherProcess node(arguments);
  const LauncherResult result = node.Wait(seconds(20));
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err,
              HasSubstr("infini_run: round 0 is open for 5 s: 1 of --nnodes=2:3 arrived (" +
                        HostNameForTest() + ":" + std::to_string(node.pid())));
  EXPECT_THAT(result.err, HasSubstr("); waiting for 1 more node(s) to reach 2 (gives up at "
                                    "join_timeout, 6 s)"));
  EXPECT_EQ(CountOccurrences(result.err, "is open for"), 1u) << result.err;
}

// ...and says it again every period (30 s; 1 s here through
// INFINI_RUN_WAITING_NOTE_S), not once.
TEST(ElasticLauncher, AnOpenRoundSaysWhomItWaitsForEveryPeriod) {
  TempDir dir;
  const int port = FreePort();
  auto arguments = ElasticNode(port, "open-round-period", "2:3", dir, {});
  *std::find(arguments.begin(), arguments.end(), "--rdzv_timeout=20") = "--rdzv_timeout=4";
  LaunchSetup setup;
  setup.extra_environment = {"INFINI_RUN_WAITING_NOTE_S=1"};
  LauncherProcess node(arguments, setup);
  const LauncherResult result = node.Wait(seconds(20));
  EXPECT_EQ(result.exit_code, 1) << result.err;
  for (const std::string waited : {"1", "2"}) {
    EXPECT_THAT(result.err, HasSubstr("infini_run: round 0 is open for " + waited +
                                      " s: 1 of --nnodes=2:3 arrived ("))
        << result.err;
  }
  EXPECT_GE(CountOccurrences(result.err, "is open for"), 3u) << result.err;
}

// A node that arrives at a round already full (MAX members) waits on the
// record's wait list, saying so every period, and is taken into the next
// round when a member is lost.
TEST(ElasticLauncher, ALateNodeAtAFullRoundSaysItWaitsAndJoinsWhenAMemberIsLost) {
  TempDir dir;
  const int port = FreePort();
  auto nodes = StartNodes(2, [&] {
    return ElasticNode(port, "full-round", "1:2", dir, {"--sleep_ms=60000", "--sleep_attempts=1"});
  });
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 2));
  LaunchSetup setup;
  setup.extra_environment = {"INFINI_RUN_WAITING_NOTE_S=1"};
  LauncherProcess late(
      ElasticNode(port, "full-round", "1:2", dir, {"--sleep_ms=60000", "--sleep_attempts=1"}),
      setup);
  std::this_thread::sleep_for(milliseconds(2500));
  EXPECT_THAT(late.OutputSoFar(),
              HasSubstr("infini_run: round 0 is full with 2 of --nnodes=1:2 ("));
  EXPECT_THAT(late.OutputSoFar(), HasSubstr(": waiting for the next round, which opens when a "
                                            "member is lost"));
  kill(nodes[1]->pid(), SIGKILL);  // not node 0: it hosts the store
  const LauncherResult survivor = nodes[0]->Wait(seconds(30));
  const LauncherResult admitted = late.Wait(seconds(30));
  nodes[1]->Wait();
  EXPECT_EQ(survivor.exit_code, 0) << survivor.err;
  EXPECT_EQ(admitted.exit_code, 0) << admitted.err;
  EXPECT_THAT(admitted.err, HasSubstr("round 1: node 1 of 2 (--nnodes=1:2)")) << admitted.err;
  ExpectWorld(dir, 1, 1, 2);
  EXPECT_TRUE(NoProcessLeft());
}

// A launcher that dies is lost when its store connection closes (on-close
// keys), not a heartbeat timeout later: with heartbeat_timeout=30 the
// survivor runs its rank in the world of one well within it (issue 34).
TEST(ElasticLauncher, AKilledLauncherIsLostWhenItsConnectionCloses) {
  TempDir dir;
  const int port = FreePort();
  auto nodes = StartNodes(2, [&] {
    auto arguments =
        ElasticNode(port, "closed", "1:2", dir, {"--sleep_ms=60000", "--sleep_attempts=1"});
    *std::find(arguments.begin(), arguments.end(),
               "--rdzv_conf=last_call_timeout=1,heartbeat_timeout=1") =
        "--rdzv_conf=last_call_timeout=1,heartbeat_timeout=30";
    return arguments;
  });
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 2));
  const auto killed = std::chrono::steady_clock::now();
  kill(nodes[1]->pid(), SIGKILL);  // not node 0: it hosts the store
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 3, seconds(25))) << nodes[0]->OutputSoFar();
  const auto recovered = std::chrono::steady_clock::now() - killed;
  const LauncherResult survivor = nodes[0]->Wait(seconds(30));
  nodes[1]->Wait();
  EXPECT_LT(recovered, seconds(10)) << survivor.err;
  std::printf("killed launcher: the survivor's rank ran in the world of one %lld ms after\n",
              static_cast<long long>(std::chrono::duration_cast<milliseconds>(recovered).count()));
  EXPECT_EQ(survivor.exit_code, 0) << survivor.err;
  EXPECT_THAT(survivor.err, HasSubstr("node 1 lost: its infini_run ("));
  EXPECT_THAT(survivor.err, HasSubstr(") closed its connection to the rendezvous store (it died)"));
  ExpectWorld(dir, 0, 1, 1);
  EXPECT_TRUE(NoProcessLeft());
}

// --on_failure=shrink goes on in place at a fixed size; an elastic run meets
// again instead: the two together are refused before anything starts, in
// one line naming both flags (issue 34 item 4).
TEST(ElasticLauncher, ShrinkOnAnElasticRunIsRefusedInOneLine) {
  TempDir dir;
  auto arguments = ElasticNode(FreePort(), "elastic-shrink", "1:2", dir, {});
  arguments.insert(arguments.begin(), "--on_failure=shrink");
  const LauncherResult result = RunLauncher(arguments);
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_EQ(result.err,
            "infini_run: error: --on_failure=shrink with an elastic --nnodes=MIN:MAX: expected one "
            "of them (an elastic run meets again at a new size when a node is lost; shrink goes "
            "on in place at a fixed --nnodes=N)\n");
  EXPECT_FALSE(Exists(dir.path() + "/0.0.pid")) << "no rank started";
}

}  // namespace
}  // namespace infini::launch::testing
