// Whole nodes under infini_run --on_failure=shrink, as real launchers on one
// machine (docs/launcher.md, "In-place recovery"): a node whose launcher is
// SIGKILLed is published as a loss of its ranks and the others finish; a
// replacement node takes its slot while the run goes on (its ranks get
// INFINI_JOINING and their own block of launch ranks); no slot free;
// --min_ranks counts lost nodes. The ranks (join_check_child) read the
// notices from the store; parallel/'s admission is tested with gpt2 apart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "launcher_harness.h"
#include "store_probe.h"
#if INFINI_TEST_WITH_ETCD
#include "etcd_cluster.h"
#endif

namespace infini::launch::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

const std::string kJoinChild = JOIN_CHECK_CHILD_PATH;

struct ShrinkRun {
  std::string endpoint = "127.0.0.1:" + std::to_string(FreePort());
  std::string heartbeat_timeout = "1";
  std::string run_id;
  int nnodes = 3;
  int processes_per_node = 1;
  std::vector<std::string> extra_flags;
  TempDir dir;

  // One launcher: node `node_rank` (-1: no --node_rank), the child waiting
  // for `losses` loss and `joins` join notices, then for <dir>/stop.
  std::vector<std::string> Node(int node_rank, int losses, int joins) const {
    std::vector<std::string> arguments = {"--nnodes=" + std::to_string(nnodes),
                                          "--nproc_per_node=" + std::to_string(processes_per_node),
                                          "--rdzv_endpoint=" + endpoint,
                                          "--rdzv_id=" + run_id,
                                          "--rdzv_timeout=20",
                                          "--rdzv_conf=heartbeat_timeout=" + heartbeat_timeout,
                                          "--on_failure=shrink",
                                          "--term_timeout=2"};
    if (node_rank >= 0) arguments.push_back("--node_rank=" + std::to_string(node_rank));
    arguments.insert(arguments.end(), extra_flags.begin(), extra_flags.end());
    arguments.insert(arguments.end(),
                     {"--", kJoinChild, "--dir=" + dir.path(), "--timeout_s=30",
                      "--losses=" + std::to_string(losses), "--joins=" + std::to_string(joins)});
    return arguments;
  }
  bool WaitFor(const std::string& name, milliseconds bound = seconds(20)) const {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (!std::filesystem::exists(dir.path() + "/" + name)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return true;
  }
  void Stop() const { std::ofstream(dir.path() + "/stop") << "1\n"; }
};

std::vector<std::unique_ptr<LauncherProcess>> StartNodes(const ShrinkRun& run, int losses,
                                                         int joins) {
  std::vector<std::unique_ptr<LauncherProcess>> nodes;
  for (int node = 0; node < run.nnodes; ++node) {
    nodes.push_back(std::make_unique<LauncherProcess>(run.Node(node, losses, joins)));
  }
  return nodes;
}

bool EveryRankStarted(const ShrinkRun& run, int ranks) {
  for (int rank = 0; rank < ranks; ++rank) {
    if (!run.WaitFor(std::to_string(rank) + ".started")) return false;
  }
  return true;
}

// Node 2 of three (two ranks each) loses its launcher: node 0 publishes ranks
// 4 and 5 as lost, once; nodes 0 and 1 finish without waiting for node 2.
TEST(ShrinkNodesTest, ANodeLostWhileItsRanksRunIsALossAndTheOthersFinish) {
  ShrinkRun run;
  run.run_id = "shrink-node-lost";
  run.processes_per_node = 2;
  auto nodes = StartNodes(run, 1, 0);
  ASSERT_TRUE(EveryRankStarted(run, 6));
  ASSERT_EQ(kill(nodes[2]->pid(), SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(run.WaitFor("0.saw_1"));
  const auto published = std::chrono::steady_clock::now() - killed;
  run.Stop();
  const LauncherResult node0 = nodes[0]->Wait(seconds(20));
  const LauncherResult node1 = nodes[1]->Wait(seconds(20));
  nodes[2]->Wait(seconds(5));
  EXPECT_EQ(node0.exit_code, 0) << node0.err;
  EXPECT_EQ(node1.exit_code, 0) << node1.err;
  // Its closed store connection (or the 1 s heartbeat timeout, whichever
  // node 0 sees first), plus the watch's step: published within a few.
  EXPECT_LT(published, seconds(8));
  std::printf("node lost: its ranks published as lost %lld ms after its launcher's SIGKILL\n",
              static_cast<long long>(std::chrono::duration_cast<milliseconds>(published).count()));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(node0.out + node1.out,
                MatchesRegex("(.|\n)*rank " + std::to_string(rank) +
                             " sees loss/1=ranks=4,5 at_ms=[0-9]+ how=node 2 \\(host [^)]+\\) "
                             "lost: its infini_run \\([^)]+\\) (sent no heartbeat for 1 s|closed "
                             "its connection to the rendezvous store \\(it died\\))(.|\n)*"));
  }
  EXPECT_THAT(node0.out, Not(HasSubstr("loss/2=")));
  for (const LauncherResult* node : {&node0, &node1}) {
    EXPECT_THAT(node->err, HasSubstr("ranks 4..5 published as lost, 4 ranks go on"));
    EXPECT_THAT(node->err, HasSubstr("1 node lost, the run finished without them"));
    EXPECT_THAT(node->err, HasSubstr("lost node 2 ("));
  }
  EXPECT_TRUE(NoProcessLeft());
}

// The TCP store's port in `run`'s endpoint.
int PortOf(const ShrinkRun& run) {
  return std::stoi(run.endpoint.substr(run.endpoint.rfind(':') + 1));
}

// Shrinking needs a run to shrink: a node lost while the nodes still join
// (node 1 of three, before node 2 arrives) stops the others as in restart
// mode, before any rank starts, naming it; restarting the run is the answer.
TEST(ShrinkNodesTest, ANodeLostWhileJoiningStopsTheOthersBeforeAnyRankStarts) {
  ShrinkRun run;
  run.run_id = "shrink-node-lost-joining";
  LauncherProcess node0(run.Node(0, 0, 0));
  LauncherProcess node1(run.Node(1, 0, 0));
  ASSERT_TRUE(WaitForStoreKey(PortOf(run), "infini_run/heartbeat/1", seconds(20)));
  ASSERT_EQ(kill(node1.pid(), SIGKILL), 0);
  const LauncherResult result = node0.Wait(seconds(15));
  node1.Wait(seconds(5));
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("node 1 lost"));
  EXPECT_FALSE(std::filesystem::exists(run.dir.path() + "/0.started")) << "no rank started";
  EXPECT_TRUE(NoProcessLeft());
}

// Nodes 0 and 1 finish, node 2's ranks still run when its launcher is lost:
// its ranks are a loss, the program finished on the others, so the run
// succeeds and names the lost node.
TEST(ShrinkNodesTest, ANodeLostAfterTheOthersFinishedEndsTheRunAsASuccessNamingIt) {
  ShrinkRun run;
  run.run_id = "shrink-node-lost-finishing";
  run.Stop();  // nodes 0 and 1: their ranks exit at once
  LauncherProcess node0(run.Node(0, 0, 0));
  LauncherProcess node1(run.Node(1, 0, 0));
  std::vector<std::string> running = run.Node(2, 0, 0);
  running.erase(std::find(running.begin(), running.end(), "--") + 1, running.end());
  running.insert(running.end(), {ChildPath(), "--sleep_ms=60000"});
  LauncherProcess node2(running);
  ASSERT_TRUE(WaitForRecord(PortOf(run), NodeDone(1), seconds(20)));
  // Node 2 started the attempt (its loss is seen at once now: killed before
  // it is ready, it would stop an attempt that never started).
  ASSERT_TRUE(WaitForRecord(PortOf(run), NodeReady(2), seconds(20)));
  ASSERT_EQ(kill(node2.pid(), SIGKILL), 0);
  const LauncherResult first = node0.Wait(seconds(15));
  const LauncherResult second = node1.Wait(seconds(15));
  node2.Wait(seconds(5));
  for (const LauncherResult* node : {&first, &second}) {
    EXPECT_EQ(node->exit_code, 0) << node->err;
    EXPECT_THAT(node->err, HasSubstr("1 node lost, the run finished without them"));
    EXPECT_THAT(node->err, HasSubstr("lost node 2 ("));
  }
  EXPECT_TRUE(NoProcessLeft());
}

// Node 2 is lost, a replacement with --node_rank=2 takes its slot while the
// run goes on; a second newcomer finds no slot free; at the end node 0 waits
// for the replacement as for any node.
TEST(ShrinkNodesTest, AReplacementNodeTakesALostSlotWithItsOwnRanks) {
  ShrinkRun run;
  run.run_id = "shrink-node-replaced";
  run.processes_per_node = 2;
  auto nodes = StartNodes(run, 1, 1);
  ASSERT_TRUE(EveryRankStarted(run, 6));
  ASSERT_EQ(kill(nodes[2]->pid(), SIGKILL), 0);
  ASSERT_TRUE(run.WaitFor("0.saw_1"));
  LauncherProcess replacement(run.Node(2, 0, 0));
  ASSERT_TRUE(run.WaitFor("6.joined") && run.WaitFor("7.joined"));
  ASSERT_TRUE(run.WaitFor("0.saw_2"));
  const LauncherResult extra = RunLauncher(run.Node(-1, 0, 0), seconds(20));
  EXPECT_EQ(extra.exit_code, 1) << extra.err;
  EXPECT_THAT(extra.err, HasSubstr("no node slot is free for the node "));
  EXPECT_THAT(extra.err, HasSubstr("every one of --nnodes=3 is taken and none was lost"));
  run.Stop();
  const LauncherResult node0 = nodes[0]->Wait(seconds(20));
  const LauncherResult node1 = nodes[1]->Wait(seconds(20));
  const LauncherResult joined = replacement.Wait(seconds(20));
  nodes[2]->Wait(seconds(5));
  EXPECT_EQ(node0.exit_code, 0) << node0.err;
  EXPECT_EQ(node1.exit_code, 0) << node1.err;
  EXPECT_EQ(joined.exit_code, 0) << joined.err;
  for (int local = 0; local < 2; ++local) {
    EXPECT_THAT(
        joined.out,
        MatchesRegex("(.|\n)*joining RANK=" + std::to_string(6 + local) +
                     " WORLD_SIZE=8 LOCAL_RANK=" + std::to_string(local) +
                     " GROUP_RANK=3 NNODES=4 INFINI_JOINING=1 notice=ranks=6,7 at_ms=[0-9]+ "
                     "how=node 2 \\(host [^)]+\\) joined\n(.|\n)*"));
  }
  EXPECT_THAT(joined.err, HasSubstr("INFINI_JOINING=1, WORLD_SIZE=8) wait to be admitted"));
  for (const LauncherResult* node : {&node0, &node1}) {
    EXPECT_THAT(node->err, MatchesRegex("(.|\n)*node 2 \\(host [^)]+\\) joined: ranks 6..7 wait "
                                        "to be admitted\n(.|\n)*"));
  }
  EXPECT_THAT(node0.out, HasSubstr("rank 0 sees join/1=ranks=6,7 at_ms="));
  EXPECT_TRUE(NoProcessLeft());
}

// One rank per node: node 1 is lost, a newcomer without --node_rank takes
// the lowest lost slot (ranks 2), is lost too and is published with its own
// ranks; the next newcomer takes the slot again (rank 3).
TEST(ShrinkNodesTest, AReplacementThatIsLostIsPublishedAndItsSlotTakenAgain) {
  ShrinkRun run;
  run.run_id = "shrink-node-twice";
  run.nnodes = 2;
  auto nodes = StartNodes(run, 2, 2);
  ASSERT_TRUE(EveryRankStarted(run, 2));
  ASSERT_EQ(kill(nodes[1]->pid(), SIGKILL), 0);
  ASSERT_TRUE(run.WaitFor("0.saw_1"));
  auto first = std::make_unique<LauncherProcess>(run.Node(-1, 0, 0));
  ASSERT_TRUE(run.WaitFor("2.joined"));
  ASSERT_TRUE(run.WaitFor("0.saw_2"));
  // Its rank has exited; the launcher waits for the others: kill it there.
  ASSERT_EQ(kill(first->pid(), SIGKILL), 0);
  ASSERT_TRUE(run.WaitFor("0.saw_3"));
  LauncherProcess second(run.Node(-1, 0, 0));
  ASSERT_TRUE(run.WaitFor("3.joined"));
  run.Stop();
  const LauncherResult node0 = nodes[0]->Wait(seconds(20));
  const LauncherResult last = second.Wait(seconds(20));
  EXPECT_EQ(node0.exit_code, 0) << node0.err;
  EXPECT_EQ(last.exit_code, 0) << last.err;
  EXPECT_THAT(node0.out, HasSubstr("rank 0 sees loss/1=ranks=1 at_ms="));
  EXPECT_THAT(node0.out, HasSubstr("rank 0 sees loss/2=ranks=2 at_ms="));
  EXPECT_THAT(node0.out, HasSubstr("rank 0 sees join/2=ranks=3 at_ms="));
  EXPECT_THAT(last.out, HasSubstr("joining RANK=3 WORLD_SIZE=4 LOCAL_RANK=0 GROUP_RANK=3 "
                                  "NNODES=4 INFINI_JOINING=2"));
  EXPECT_THAT(node0.err, HasSubstr("1 rank goes on"));
  EXPECT_THAT(node0.err, HasSubstr("2 nodes lost, the run finished without them"));
  EXPECT_TRUE(NoProcessLeft());
}

// --min_ranks=3 of three: a node's loss leaves two, and every node stops
// with the one line that says so.
TEST(ShrinkNodesTest, ANodeLossBelowMinRanksStopsEveryNode) {
  ShrinkRun run;
  run.run_id = "shrink-node-min";
  run.extra_flags = {"--min_ranks=3"};
  auto nodes = StartNodes(run, 1, 0);
  ASSERT_TRUE(EveryRankStarted(run, 3));
  ASSERT_EQ(kill(nodes[2]->pid(), SIGKILL), 0);
  const LauncherResult node0 = nodes[0]->Wait(seconds(20));
  const LauncherResult node1 = nodes[1]->Wait(seconds(20));
  nodes[2]->Wait(seconds(5));
  EXPECT_NE(node0.exit_code, 0) << node0.err;
  EXPECT_NE(node1.exit_code, 0) << node1.err;
  EXPECT_LT(node0.elapsed, seconds(15));
  for (const LauncherResult* node : {&node0, &node1}) {
    EXPECT_THAT(node->err,
                HasSubstr("2 ranks left, fewer than --min_ranks=3; stopping every rank"));
  }
  EXPECT_TRUE(NoProcessLeft());
}

#if INFINI_TEST_WITH_ETCD
// On etcd every node sees a lost node's lease go: one of them claims the
// loss and publishes it, once. A replacement's lease is watched afresh: its
// own loss is published with its own rank.
TEST(ShrinkNodesTest, OnEtcdANodeLossIsPublishedOnceAndAReplacementIsWatchedAgain) {
  etcd_testing::EtcdCluster cluster(1);
  ShrinkRun run;
  run.run_id = "shrink-node-etcd";
  run.endpoint = cluster.endpoints();
  run.heartbeat_timeout = "2";  // a lease, as the other etcd tests
  run.extra_flags = {"--rdzv_backend=etcd", "--local_addr=127.0.0.1"};
  auto nodes = StartNodes(run, 2, 1);
  ASSERT_TRUE(EveryRankStarted(run, 3));
  ASSERT_EQ(kill(nodes[2]->pid(), SIGKILL), 0);
  ASSERT_TRUE(run.WaitFor("0.saw_1"))
      << nodes[0]->Wait(seconds(1)).err << nodes[1]->Wait(seconds(1)).err;
  auto replacement = std::make_unique<LauncherProcess>(run.Node(2, 0, 0));
  ASSERT_TRUE(run.WaitFor("3.joined")) << replacement->Wait(seconds(1)).err;
  ASSERT_TRUE(run.WaitFor("0.saw_2"));
  ASSERT_EQ(kill(replacement->pid(), SIGKILL), 0);
  ASSERT_TRUE(run.WaitFor("0.saw_3"))
      << nodes[0]->Wait(seconds(1)).err << nodes[1]->Wait(seconds(1)).err;
  std::this_thread::sleep_for(milliseconds(500));  // a second claimer would be done by now
  run.Stop();
  const LauncherResult node0 = nodes[0]->Wait(seconds(20));
  const LauncherResult node1 = nodes[1]->Wait(seconds(20));
  EXPECT_EQ(node0.exit_code, 0) << node0.err;
  EXPECT_EQ(node1.exit_code, 0) << node1.err;
  EXPECT_THAT(node0.out, HasSubstr("rank 0 sees loss/1=ranks=2 at_ms="));
  EXPECT_THAT(node0.out, HasSubstr("let its etcd lease expire"));
  EXPECT_THAT(node0.out, HasSubstr("rank 0 sees loss/2=ranks=3 at_ms="));
  EXPECT_THAT(node0.out, Not(HasSubstr("loss/3=")));
  EXPECT_THAT(node1.err, HasSubstr("2 nodes lost, the run finished without them"));
  EXPECT_TRUE(NoProcessLeft());
}
#endif

}  // namespace
}  // namespace infini::launch::testing
