// infini_run --rdzv_backend=etcd with a real etcd cluster: real launchers,
// real ranks (launch_test_child), real etcd members killed mid-run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <set>
#include <thread>

#include "etcd_cluster.h"
#include "infini/rendezvous/etcd_store.h"
#include "launcher_harness.h"

namespace infini::etcd_testing {
namespace {

using launch::testing::ChildPath;
using launch::testing::FindRankPid;
using launch::testing::FreePort;
using launch::testing::LauncherProcess;
using launch::testing::LauncherResult;
using launch::testing::Lines;
using launch::testing::NoProcessLeft;
using launch::testing::RecordedEnvironment;
using launch::testing::RunLauncher;
using launch::testing::TempDir;
using launch::testing::WaitForPidFiles;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> NodeFlags(const std::string& endpoints, const std::string& run_id,
                                   const TempDir& dir, const std::vector<std::string>& child = {},
                                   const std::string& backend = "etcd",
                                   int heartbeat_timeout_s = 2) {
  std::vector<std::string> flags = {
      "--nnodes=2",
      "--nproc_per_node=2",
      "--rdzv_backend=" + backend,
      "--rdzv_endpoint=" + endpoints,
      "--rdzv_id=" + run_id,
      "--rdzv_timeout=30",
      "--rdzv_conf=heartbeat_timeout=" + std::to_string(heartbeat_timeout_s),
      "--local_addr=127.0.0.1",
      "--term_timeout=2",
      "--",
      ChildPath(),
      "--dir=" + dir.path()};
  flags.insert(flags.end(), child.begin(), child.end());
  return flags;
}

// The infini_run lines of a launcher's stderr.
std::vector<std::string> LauncherLines(const std::string& err) {
  std::vector<std::string> lines;
  for (const std::string& line : Lines(err)) {
    if (line.rfind("infini_run", 0) == 0) lines.push_back(line);
  }
  return lines;
}

TEST(EtcdLauncher, TwoNodesMeetThroughEtcdAndLeaveNoKeys) {
  EtcdCluster cluster(1);
  TempDir dir;
  // torchrun's spelling on one node, ours on the other: both are etcd.
  LauncherProcess node_a(NodeFlags(cluster.endpoints(), "meet", dir, {}, "etcd-v2"));
  LauncherProcess node_b(NodeFlags(cluster.endpoints(), "meet", dir));
  LauncherResult a = node_a.Wait(seconds(60));
  LauncherResult b = node_b.Wait(seconds(60));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  std::set<std::string> ranks, store_addresses, master_addresses;
  for (int rank = 0; rank < 4; ++rank) {
    auto environment = RecordedEnvironment(dir.path(), rank);
    ranks.insert(environment["RANK"]);
    EXPECT_EQ(environment["WORLD_SIZE"], "4");
    store_addresses.insert(environment["INFINI_STORE_ADDR"] + ":" +
                           environment["INFINI_STORE_PORT"]);
    master_addresses.insert(environment["MASTER_ADDR"] + ":" + environment["MASTER_PORT"]);
  }
  EXPECT_EQ(ranks.size(), 4u) << "each rank once";
  // One ranks' store per node (its launcher's relay of node 0's store), never
  // etcd itself.
  ASSERT_EQ(store_addresses.size(), 2u);
  for (const std::string& address : store_addresses) {
    EXPECT_THAT(address, ::testing::StartsWith("127.0.0.1:"));
    EXPECT_NE(address, cluster.endpoint(0));
  }
  EXPECT_EQ(master_addresses.size(), 1u);
  // The run's keys are gone: removed by node 0, or expired with the leases.
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  while (!cluster.AllKeys().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_THAT(cluster.AllKeys(), ::testing::IsEmpty());
  EXPECT_TRUE(NoProcessLeft());
}

// etcd with its own authentication on: launchers given INFINI_ETCD_USER and
// INFINI_ETCD_PASSWORD meet and clean up; one without them, or with a wrong
// password, stops at once with one line naming the variables.
TEST(EtcdLauncher, NodesLogInToAnEtcdWithAuthenticationAndOthersAreToldWhatToSet) {
  EtcdCluster cluster(1);
  cluster.EnableAuthentication("the-root-password");
  TempDir dir;
  launch::testing::LaunchSetup login;
  login.extra_environment = {"INFINI_ETCD_USER=root", "INFINI_ETCD_PASSWORD=the-root-password"};
  LauncherProcess node_a(NodeFlags(cluster.endpoints(), "auth", dir), login);
  LauncherProcess node_b(NodeFlags(cluster.endpoints(), "auth", dir), login);
  LauncherResult a = node_a.Wait(seconds(60));
  LauncherResult b = node_b.Wait(seconds(60));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  while (!cluster.AllKeys().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_THAT(cluster.AllKeys(), ::testing::IsEmpty());

  LauncherProcess anonymous(NodeFlags(cluster.endpoints(), "auth_missing", dir));
  LauncherResult refused = anonymous.Wait(seconds(30));
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("has authentication on and INFINI_ETCD_USER is not set"));
  EXPECT_LT(refused.elapsed, seconds(10)) << "at once, not after --rdzv_timeout";

  launch::testing::LaunchSetup wrong;
  wrong.extra_environment = {"INFINI_ETCD_USER=root", "INFINI_ETCD_PASSWORD=guess"};
  LauncherProcess guesser(NodeFlags(cluster.endpoints(), "auth_wrong", dir), wrong);
  LauncherResult denied = guesser.Wait(seconds(30));
  EXPECT_EQ(denied.exit_code, 1) << denied.err;
  EXPECT_THAT(denied.err, HasSubstr("refused INFINI_ETCD_USER='root'"));
  EXPECT_THAT(denied.err, Not(HasSubstr("guess"))) << "the password is never printed";
  EXPECT_TRUE(NoProcessLeft());
}

TEST(EtcdLauncher, RunGoesOnWhenOneOfThreeEtcdMembersDies) {
  EtcdCluster cluster(3);
  TempDir dir;
  const auto child = std::vector<std::string>{"--sleep_ms=6000"};
  // Leases long enough to outlive a re-election on a loaded CI machine: this
  // test is about etcd losing a member, not about a node's lease running out.
  LauncherProcess node_a(NodeFlags(cluster.endpoints(), "member_lost", dir, child, "etcd", 10));
  LauncherProcess node_b(NodeFlags(cluster.endpoints(), "member_lost", dir, child, "etcd", 10));
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 4));
  cluster.Kill(0);  // the first member: every launcher talks to it first
  LauncherResult a = node_a.Wait(seconds(60));
  LauncherResult b = node_b.Wait(seconds(60));
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(NoProcessLeft());
}

void ExpectOthersNameTheLostNode(int signal_number) {
  EtcdCluster cluster(1);
  TempDir dir;
  const auto child = std::vector<std::string>{"--sleep_ms=60000"};
  const std::string run_id = "lease_" + std::to_string(signal_number);
  // Node ranks given, so that the test knows whom it stops.
  auto flags0 = NodeFlags(cluster.endpoints(), run_id, dir, child);
  auto flags1 = flags0;
  flags0.insert(flags0.begin(), "--node_rank=0");
  flags1.insert(flags1.begin(), "--node_rank=1");
  LauncherProcess node0(flags0);
  LauncherProcess node1(flags1);
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 4));
  kill(node1.pid(), signal_number);
  // heartbeat_timeout=2: the lease runs out within about 2 s; 30 s catches a hang.
  LauncherResult result = node0.Wait(seconds(30));
  if (signal_number == SIGSTOP) kill(node1.pid(), SIGCONT);
  LauncherResult stopped = node1.Wait(seconds(30));
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("node 1 lost"));
  EXPECT_THAT(result.err, HasSubstr("etcd lease"));
  if (signal_number == SIGSTOP) {
    EXPECT_NE(stopped.exit_code, 0) << "the stalled node, continued, must stop too";
  }
  EXPECT_TRUE(NoProcessLeft());
}

TEST(EtcdLauncher, KilledNodeIsNamedLostWhenItsLeaseExpires) {
  ExpectOthersNameTheLostNode(SIGKILL);
}

TEST(EtcdLauncher, StalledNodeIsNamedLostWhenItsLeaseExpires) {
  ExpectOthersNameTheLostNode(SIGSTOP);
}

// Every launcher of a run SIGKILLed: the run record, which outlives its
// writers on etcd, is abandoned once their leases ran out, and a rerun with
// the same --rdzv_id (and secret) starts afresh instead of finding the dead
// run's closed round full.
TEST(EtcdLauncher, ARerunWithTheSameIdAfterEveryLauncherWasKilledStartsAfresh) {
  EtcdCluster cluster(1);
  TempDir dir;
  {
    LauncherProcess node0(NodeFlags(cluster.endpoints(), "rerun", dir, {"--sleep_ms=60000"}));
    LauncherProcess node1(NodeFlags(cluster.endpoints(), "rerun", dir, {"--sleep_ms=60000"}));
    ASSERT_TRUE(WaitForPidFiles(dir.path(), 4));
    kill(node0.pid(), SIGKILL);
    kill(node1.pid(), SIGKILL);
    node0.Wait(seconds(30));
    node1.Wait(seconds(30));
  }
  // Their leases (heartbeat_timeout=2) run out; the record stays.
  const auto is_presence = [](const std::string& key) {
    return key.find("/present/") != std::string::npos;
  };
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto keys = cluster.AllKeys();
    if (std::none_of(keys.begin(), keys.end(), is_presence)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto left = cluster.AllKeys();
  ASSERT_TRUE(std::any_of(left.begin(), left.end(), [](const std::string& key) {
    return key.find("infini_run/record") != std::string::npos;
  })) << "the dead run's record is there for the rerun to find";
  TempDir again;
  LauncherProcess node0(NodeFlags(cluster.endpoints(), "rerun", again));
  LauncherProcess node1(NodeFlags(cluster.endpoints(), "rerun", again));
  const LauncherResult first = node0.Wait(seconds(60));
  const LauncherResult second = node1.Wait(seconds(60));
  EXPECT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(second.exit_code, 0) << second.err;
  std::set<std::string> ranks;
  for (int rank = 0; rank < 4; ++rank)
    ranks.insert(RecordedEnvironment(again.path(), rank)["RANK"]);
  EXPECT_EQ(ranks.size(), 4u) << "each rank of the rerun once";
  EXPECT_TRUE(NoProcessLeft());
}

// --nnodes=MIN:MAX on etcd: any node may go, node 0 (which hosts the ranks'
// store) too. The survivors meet in round 1 without it; the new node 0 hosts
// a new ranks' store; the restarted ranks see the smaller world.
TEST(EtcdLauncher, ElasticRunSurvivesTheLossOfNodeZero) {
  EtcdCluster cluster(1);
  TempDir dir;
  auto flags = [&] {
    auto node = NodeFlags(cluster.endpoints(), "elastic", dir,
                          {"--sleep_ms=60000", "--sleep_attempts=1"}, "etcd", 2);
    node[0] = "--nnodes=2:3";
    node[1] = "--nproc_per_node=1";
    node[6] = "--rdzv_conf=heartbeat_timeout=2,last_call_timeout=1";
    return node;
  };
  std::vector<std::unique_ptr<LauncherProcess>> nodes;
  for (int node = 0; node < 3; ++node) nodes.push_back(std::make_unique<LauncherProcess>(flags()));
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 3));
  const std::string first_store = RecordedEnvironment(dir.path(), 0, 0)["INFINI_STORE_PORT"];
  size_t node0 = nodes.size();
  for (size_t node = 0; node < nodes.size() && node0 == nodes.size(); ++node) {
    if (FindRankPid(nodes[node]->pid(), 0, seconds(2)) > 0) node0 = node;
  }
  ASSERT_LT(node0, nodes.size());
  kill(nodes[node0]->pid(), SIGKILL);
  for (size_t node = 0; node < nodes.size(); ++node) {
    LauncherResult result = nodes[node]->Wait(seconds(40));
    if (node == node0) continue;
    EXPECT_EQ(result.exit_code, 0) << result.err;
    EXPECT_THAT(result.err, HasSubstr("node 0 lost: its infini_run"));
    EXPECT_THAT(result.err, HasSubstr("let its etcd lease expire"));
    EXPECT_THAT(result.err, HasSubstr("round 1: node "));
    EXPECT_THAT(result.err, Not(HasSubstr("round 2"))) << "one loss, one new round";
  }
  for (int rank = 0; rank < 2; ++rank) {
    auto env = RecordedEnvironment(dir.path(), rank, 1);
    EXPECT_EQ(env["WORLD_SIZE"], "2") << rank;
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(rank));
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "1");
    EXPECT_NE(env["INFINI_STORE_PORT"], first_store) << "the new node 0 hosts the ranks' store";
  }
  EXPECT_TRUE(NoProcessLeft());
}

// Polls etcd (bounded) until a key ending in `suffix` exists.
bool WaitForKeyEnding(const EtcdCluster& cluster, const std::string& suffix, seconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const std::string& key : cluster.AllKeys()) {
      if (key.size() >= suffix.size() &&
          key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
        return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Node ranks given, so that the test knows which launcher is which node.
std::vector<std::string> WithNodeRank(int node_rank, std::vector<std::string> flags) {
  flags.insert(flags.begin(), "--node_rank=" + std::to_string(node_rank));
  return flags;
}

TEST(EtcdLauncher, ARankFailureOnOneNodeRestartsBothNodes) {
  EtcdCluster cluster(1);
  TempDir dir;
  // Rank 3 (node 1) fails in attempts 0 and 1; attempt 2 succeeds everywhere.
  auto flags =
      NodeFlags(cluster.endpoints(), "restart", dir,
                {"--fail_rank=3", "--fail_attempts=2", "--exit_code=4", "--fail_after_ms=100"});
  flags.insert(flags.begin(), "--max_restarts=2");
  LauncherProcess node0(WithNodeRank(0, flags));
  LauncherProcess node1(WithNodeRank(1, flags));
  LauncherResult result0 = node0.Wait(seconds(90));
  LauncherResult result1 = node1.Wait(seconds(90));
  EXPECT_EQ(result0.exit_code, 0) << result0.err;
  EXPECT_EQ(result1.exit_code, 0) << result1.err;
  // Node 0's ranks, which never failed, were restarted with node 1's.
  EXPECT_EQ(RecordedEnvironment(dir.path(), 0, 2)["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_TRUE(NoProcessLeft());
}

TEST(EtcdLauncher, ARankFailureWithoutRestartsStopsTheOtherNode) {
  EtcdCluster cluster(1);
  TempDir dir;
  auto flags = NodeFlags(cluster.endpoints(), "stop", dir,
                         {"--fail_rank=3", "--exit_code=5", "--long_from=0", "--sleep_ms=60000"});
  LauncherProcess node0(WithNodeRank(0, flags));
  LauncherProcess node1(WithNodeRank(1, flags));
  LauncherResult result0 = node0.Wait(seconds(60));
  LauncherResult result1 = node1.Wait(seconds(60));
  EXPECT_EQ(result1.exit_code, 5) << result1.err;
  EXPECT_NE(result0.exit_code, 0) << result0.err;
  EXPECT_THAT(result0.err, HasSubstr("node 1"));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(EtcdLauncher, NodesThatDisagreeOnTheConfigStopWithOneLine) {
  EtcdCluster cluster(1);
  TempDir dir;
  LauncherProcess node0(
      WithNodeRank(0, NodeFlags(cluster.endpoints(), "disagree", dir, {"--sleep_ms=60000"})));
  auto other = NodeFlags(cluster.endpoints(), "disagree", dir, {"--sleep_ms=60000"});
  *std::find(other.begin(), other.end(), std::string("--nproc_per_node=2")) = "--nproc_per_node=3";
  // Node 1 comes second: node 0's configuration is the run's.
  ASSERT_TRUE(WaitForKeyEnding(cluster, "/infini_run/config", seconds(20)));
  LauncherResult result1 = RunLauncher(WithNodeRank(1, other), seconds(60));
  LauncherResult result0 = node0.Wait(seconds(60));
  EXPECT_NE(result1.exit_code, 0);
  EXPECT_THAT(result1.err, HasSubstr("node 1 disagrees with the run on --nproc_per_node: the "
                                     "first node has '2', node 1 has '3'"));
  EXPECT_NE(result0.exit_code, 0) << "node 0 is told and stops";
  EXPECT_THAT(result0.err, HasSubstr("disagrees"));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(EtcdLauncher, UnreachableEtcdIsOneClearLine) {
  TempDir dir;
  const std::string endpoint = "127.0.0.1:" + std::to_string(FreePort());
  LauncherResult result = RunLauncher(NodeFlags(endpoint, "nobody", dir), seconds(60));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.exit_code, -1) << "hung";
  const auto lines = LauncherLines(result.err);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_THAT(lines[0], HasSubstr("cannot reach etcd at " + endpoint));
  EXPECT_THAT(lines[0], HasSubstr("--rdzv_endpoint"));
}

TEST(EtcdLauncher, EtcdWithoutEndpointIsOneClearLine) {
  TempDir dir;
  auto flags = NodeFlags("", "noendpoint", dir);
  flags.erase(std::find(flags.begin(), flags.end(), "--rdzv_endpoint="));
  LauncherResult result = RunLauncher(flags, seconds(30));
  EXPECT_NE(result.exit_code, 0);
  const auto lines = LauncherLines(result.err);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_THAT(lines[0], HasSubstr("--rdzv_endpoint"));
}

}  // namespace
}  // namespace infini::etcd_testing
