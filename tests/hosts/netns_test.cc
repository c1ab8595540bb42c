// Several hosts on one machine: network namespaces joined by a bridge
// (scripts/netns_hosts.sh), addresses 10.77.0.<i+1> only on their veth
// interfaces, one infini_run per namespace. The rendezvous and gloo's traffic
// cross real interfaces; a link is cut mid-run; a host never arrives. Skipped,
// with the reason, where namespaces cannot be made (not root, no CAP_NET_ADMIN).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "host_process.h"

namespace {

using infini::hosts_testing::ChildProcess;
using infini::hosts_testing::ExitReport;
using infini::hosts_testing::NoProcessLeft;
using infini::hosts_testing::RunCommand;
using infini::hosts_testing::TempDir;
using namespace std::chrono_literals;

const std::string kBinDir = INFINI_HOSTS_BIN_DIR;
const std::string kScript = std::string(INFINI_HOSTS_SCRIPTS_DIR) + "/netns_hosts.sh";
const std::string kMaster = "10.77.0.1";  // host 0's address (netns_hosts.sh)

class HostsInNamespaces : public ::testing::Test {
 protected:
  // Namespace names carry this process's pid: concurrent runs do not meet.
  const std::string prefix_ = "ih" + std::to_string(getpid() % 10000000);

  void SetUp() override {
    std::string why;
    if (RunCommand({kScript, "probe"}, 20s, &why) != 0) {
      GTEST_SKIP() << "network namespaces are not permitted here: " << why;
    }
    std::string output;
    // Namespaces of an earlier run that was killed before its TearDown.
    EXPECT_EQ(RunCommand({kScript, "reap", "ih"}, 60s, &output), 0) << output;
    ASSERT_EQ(RunCommand({kScript, "up", prefix_, "3"}, 30s, &output), 0) << output;
    token_file_ = scratch_.path() + "/token";
    infini::hosts_testing::WriteFile(token_file_, std::string(64, 'a') + "\n");
  }

  void TearDown() override {
    nodes_.clear();  // kills what is still running, before the namespaces go
    std::string output;
    EXPECT_EQ(RunCommand({kScript, "down", prefix_}, 30s, &output), 0) << output;
  }

  std::string Namespace(int host) const { return prefix_ + std::to_string(host); }

  // infini_run for node `node` of `nnodes` in host `node`'s namespace.
  // `nnodes` "MIN:MAX": an elastic run, whose rounds number the nodes (no
  // --node_rank; host 0 binds the endpoint, so it hosts the store).
  ChildProcess& StartNode(int node, const std::string& nnodes,
                          const std::vector<std::string>& launcher_flags,
                          const std::vector<std::string>& program) {
    std::vector<std::string> argv = {
        "ip", "netns", "exec", Namespace(node), kBinDir + "/infini_run", "--nnodes=" + nnodes};
    if (nnodes.find(':') == std::string::npos) {
      argv.push_back("--node_rank=" + std::to_string(node));
    }
    const std::vector<std::string> common = {"--nproc_per_node=1", "--master_addr=" + kMaster,
                                             "--master_port=29500", "--ccl_backend=gloo"};
    argv.insert(argv.end(), common.begin(), common.end());
    argv.insert(argv.end(), launcher_flags.begin(), launcher_flags.end());
    argv.push_back("--");
    argv.insert(argv.end(), program.begin(), program.end());
    // GLOO_SOCKET_IFNAME stays unset: the route to MASTER_ADDR picks eth0.
    nodes_.push_back(
        std::make_unique<ChildProcess>(argv, std::vector<std::string>{"GLOO_SOCKET_IFNAME="},
                                       scratch_.path() + "/node" + std::to_string(node) + ".log"));
    return *nodes_.back();
  }
  ChildProcess& StartNode(int node, int nnodes, const std::vector<std::string>& launcher_flags,
                          const std::vector<std::string>& program) {
    return StartNode(node, std::to_string(nnodes), launcher_flags, program);
  }

  std::string RdzvConf(const std::string& extra = "") const {
    return "--rdzv_conf=token_file=" + token_file_ + (extra.empty() ? "" : "," + extra);
  }

  TempDir scratch_;
  std::string token_file_;
  std::vector<std::unique_ptr<ChildProcess>> nodes_;
};

TEST_F(HostsInNamespaces, TwoNodesRunTheCollectiveCheckOverTheirVethInterfaces) {
  const std::vector<std::string> check = {kBinDir + "/parallel_check", "--threads_per_process=2"};
  const auto started = std::chrono::steady_clock::now();
  ChildProcess& node0 = StartNode(0, 2, {RdzvConf()}, check);
  ChildProcess& node1 = StartNode(1, 2, {RdzvConf()}, check);
  const ExitReport first = node0.Wait(120s);
  const ExitReport second = node1.Wait(30s);
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  ASSERT_TRUE(first.exited && second.exited) << node0.Output() << node1.Output();
  EXPECT_EQ(first.exit_code, 0) << node0.Output();
  EXPECT_EQ(second.exit_code, 0) << node1.Output();
  // Four ranks (2 nodes x 1 process x 2 threads), each checked its groups.
  const std::string all = node0.Output() + node1.Output();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(
        all.find("rank " + std::to_string(rank) + "/4 (node " + std::to_string(rank / 2) + "/2"),
        std::string::npos)
        << all;
  }
  EXPECT_EQ(all.find("error"), std::string::npos) << all;
  RecordProperty("two_node_gloo_run_ms", static_cast<int>(elapsed.count()));
  std::printf("2-node gloo run across namespaces: %lld ms\n",
              static_cast<long long>(elapsed.count()));
  EXPECT_TRUE(NoProcessLeft());
}

TEST_F(HostsInNamespaces, ALinkCutMidRunStopsEveryNodeWithAClearMessage) {
  const std::vector<std::string> loop = {kBinDir + "/all_reduce_loop", "--seconds=120"};
  ChildProcess& node0 = StartNode(0, 2, {RdzvConf("heartbeat_timeout=5")}, loop);
  ChildProcess& node1 = StartNode(1, 2, {RdzvConf("heartbeat_timeout=5")}, loop);
  ASSERT_TRUE(node0.WaitForOutput("rank 0 running", 60s)) << node0.Output();
  ASSERT_TRUE(node1.WaitForOutput("rank 1 running", 60s)) << node1.Output();

  std::string output;
  ASSERT_EQ(RunCommand({kScript, "cut", prefix_, "1"}, 10s, &output), 0) << output;
  const auto cut = std::chrono::steady_clock::now();
  // Bound: the heartbeat timeout (5 s) plus the store's answer timeout, generously.
  const ExitReport first = node0.Wait(90s);
  const ExitReport second = node1.Wait(90s);
  ASSERT_TRUE(first.exited) << "node 0 still running 90 s after the cut:\n" << node0.Output();
  ASSERT_TRUE(second.exited) << "node 1 still running 90 s after the cut:\n" << node1.Output();
  std::printf("link cut: both nodes stopped %lld ms after the cut\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - cut)
                                         .count()));
  EXPECT_NE(first.exit_code, 0);
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(node0.Output().find("node 1 lost"), std::string::npos) << node0.Output();
  EXPECT_NE(node1.Output().find("lost the rendezvous store at " + kMaster), std::string::npos)
      << node1.Output();
  EXPECT_EQ(node0.Output().find(" done after "), std::string::npos) << "the cut came too late";
  EXPECT_TRUE(NoProcessLeft());
}

// --nnodes=2:3 on three hosts: host 2's link is cut while the all-reduce
// loop runs. Host 2 loses node 0's store and stops (the side without the
// store); hosts 0 and 1 name it lost, meet again in round 1 and run the
// collective check on a world of two.
TEST_F(HostsInNamespaces, AnElasticRunGoesOnWithoutAHostWhoseLinkIsCut) {
  const std::vector<std::string> program = {
      "sh", "-c",
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then exec " + kBinDir +
          "/all_reduce_loop --seconds=120; else exec " + kBinDir +
          "/parallel_check --threads_per_process=1 --tensor_parallel=1 --pipeline_parallel=1; fi"};
  const std::vector<std::string> flags = {RdzvConf("heartbeat_timeout=2,last_call_timeout=1"),
                                          "--term_timeout=2"};
  ChildProcess& node0 = StartNode(0, "2:3", flags, program);
  std::this_thread::sleep_for(300ms);  // host 0 binds the endpoint first
  ChildProcess& node1 = StartNode(1, "2:3", flags, program);
  ChildProcess& node2 = StartNode(2, "2:3", flags, program);
  for (ChildProcess* node : {&node0, &node1, &node2}) {
    ASSERT_TRUE(node->WaitForOutput("WORLD_SIZE=3, attempt 0", 60s)) << node->Output();
  }
  ASSERT_TRUE(node0.WaitForOutput(" running", 60s)) << node0.Output();
  // Which host got which node rank is the arrival order's: host 2 is cut.
  std::string output;
  ASSERT_EQ(RunCommand({kScript, "cut", prefix_, "2"}, 10s, &output), 0) << output;
  const ExitReport first = node0.Wait(90s);
  const ExitReport second = node1.Wait(30s);
  const ExitReport cut = node2.Wait(30s);
  ASSERT_TRUE(first.exited && second.exited && cut.exited)
      << node0.Output() << node1.Output() << node2.Output();
  EXPECT_EQ(first.exit_code, 0) << node0.Output();
  EXPECT_EQ(second.exit_code, 0) << node1.Output();
  EXPECT_NE(cut.exit_code, 0) << node2.Output();
  for (const ChildProcess* node : {&node0, &node1}) {
    EXPECT_NE(node->Output().find(" lost: its infini_run"), std::string::npos) << node->Output();
    EXPECT_NE(node->Output().find("WORLD_SIZE=2, attempt 1"), std::string::npos) << node->Output();
  }
  EXPECT_NE(node2.Output().find("node 0 hosts the run's store (--rdzv_backend=c10d): its loss "
                                "ends the run"),
            std::string::npos)
      << node2.Output();
  const std::string survivors = node0.Output() + node1.Output();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(
        survivors.find("rank " + std::to_string(rank) + "/2 (node " + std::to_string(rank) + "/2"),
        std::string::npos)
        << survivors;
  }
  EXPECT_TRUE(NoProcessLeft());
}

TEST_F(HostsInNamespaces, AHostThatNeverArrivesStopsTheOthersAfterTheRendezvousTimeout) {
  const std::vector<std::string> check = {kBinDir + "/parallel_check", "--threads_per_process=1"};
  // Three hosts, node 2 never starts.
  ChildProcess& node0 = StartNode(0, 3, {RdzvConf(), "--rdzv_timeout=8"}, check);
  ChildProcess& node1 = StartNode(1, 3, {RdzvConf(), "--rdzv_timeout=8"}, check);
  const ExitReport first = node0.Wait(60s);
  const ExitReport second = node1.Wait(60s);
  ASSERT_TRUE(first.exited && second.exited) << node0.Output() << node1.Output();
  for (const ChildProcess* node : {&node0, &node1}) {
    EXPECT_NE(node->Output().find("--rdzv_timeout"), std::string::npos) << node->Output();
    EXPECT_NE(node->Output().find("missing node(s) 2"), std::string::npos) << node->Output();
  }
  EXPECT_NE(first.exit_code, 0);
  EXPECT_NE(second.exit_code, 0);
  // Not before the timeout: they waited for the host, then stopped.
  EXPECT_GE(first.elapsed, 7s);
  EXPECT_TRUE(NoProcessLeft());
}

// A host whose route to the master leaves through loopback (here: a route
// of the master's network via lo, source 127.0.0.1) cannot be reached by its
// peers: gloo refuses at init naming the address and GLOO_SOCKET_IFNAME,
// instead of hanging until the watchdog. Naming the interface still wins.
TEST_F(HostsInNamespaces, GlooRefusesALoopbackRouteToARemoteMasterNamingTheVariable) {
  std::string output;
  ASSERT_EQ(RunCommand({"ip", "-n", Namespace(2), "route", "add", "10.88.0.0/24", "dev", "lo",
                        "src", "127.0.0.1"},
                       10s, &output),
            0)
      << output;
  const std::vector<std::string> one_rank = {"ip",
                                             "netns",
                                             "exec",
                                             Namespace(2),
                                             "env",
                                             "RANK=0",
                                             "WORLD_SIZE=1",
                                             "LOCAL_RANK=0",
                                             "LOCAL_WORLD_SIZE=1",
                                             "MASTER_ADDR=10.88.0.9",
                                             kBinDir + "/parallel_check",
                                             "--ccl_backend=gloo",
                                             "--tensor_parallel=1",
                                             "--pipeline_parallel=1"};
  ChildProcess refused(one_rank, {"GLOO_SOCKET_IFNAME="}, scratch_.path() + "/refused.log");
  const ExitReport report = refused.Wait(60s);
  ASSERT_TRUE(report.exited) << refused.Output();
  EXPECT_NE(report.exit_code, 0);
  for (const char* part : {"loopback address 127.0.0.1", "MASTER_ADDR=10.88.0.9",
                           "set GLOO_SOCKET_IFNAME to the interface"}) {
    EXPECT_NE(refused.Output().find(part), std::string::npos) << part << "\n" << refused.Output();
  }
  ChildProcess chosen(one_rank, {"GLOO_SOCKET_IFNAME=lo"}, scratch_.path() + "/chosen.log");
  const ExitReport chosen_report = chosen.Wait(60s);
  ASSERT_TRUE(chosen_report.exited) << chosen.Output();
  EXPECT_EQ(chosen_report.exit_code, 0) << chosen.Output();
}

// The case: the master's host name resolves to loopback on this
// host (Debian's /etc/hosts maps the host's own name to 127.0.1.1) while the
// run spans hosts (WORLD_SIZE > LOCAL_WORLD_SIZE). Before, gloo advertised
// 127.0.1.1 and the other hosts hung until the watchdog; now every rank fails
// at init with one line naming the variable and GLOO_SOCKET_IFNAME.
TEST_F(HostsInNamespaces, GlooRefusesAMasterNameThatResolvesToLoopbackWhenTheRunSpansHosts) {
  std::string output;
  ASSERT_EQ(RunCommand({kScript, "name", prefix_, "0", "127.0.1.1 node0.test"}, 10s, &output), 0)
      << output;
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    // Two "nodes" of one rank each, as torchrun would describe them.
    ranks.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{
            "ip", "netns", "exec", Namespace(0), "env", "RANK=" + std::to_string(rank),
            "GROUP_RANK=" + std::to_string(rank), "WORLD_SIZE=2", "LOCAL_RANK=0",
            "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=node0.test", "MASTER_PORT=29500",
            // Rank 1 may look for the store only after rank 0 refused and
            // left: it then retries until the store's connect deadline,
            // which must end inside the test's bound (by default
            // INFINI_CCL_TIMEOUT_S + 30 s; 5 s is enough to meet a live store).
            "INFINI_CCL_TIMEOUT_S=5", "INFINI_CCL_STORE_CONNECT_TIMEOUT_S=5",
            kBinDir + "/parallel_check", "--ccl_backend=gloo", "--tensor_parallel=1",
            "--pipeline_parallel=1"},
        std::vector<std::string>{"GLOO_SOCKET_IFNAME="},
        scratch_.path() + "/rank" + std::to_string(rank) + ".log"));
  }
  // Rank 0 (it hosts the store) refuses at init; rank 1 loses the store when
  // rank 0 exits, or never finds it and gives up at its connect deadline:
  // either way it stops, no hang.
  for (auto& rank : ranks) {
    const ExitReport report = rank->Wait(60s);
    ASSERT_TRUE(report.exited) << rank->Output();
    EXPECT_NE(report.exit_code, 0) << rank->Output();
  }
  for (const char* part : {"gloo would use the loopback address 127.", "MASTER_ADDR=node0.test",
                           "WORLD_SIZE=2 > LOCAL_WORLD_SIZE=1", "set GLOO_SOCKET_IFNAME"}) {
    EXPECT_NE(ranks[0]->Output().find(part), std::string::npos) << part << "\n"
                                                                << ranks[0]->Output();
  }
}

// Without a launcher, global rank 0 hosts the store for MASTER_ADDR. A name
// that resolves on its host to its own non-loopback address (here the veth
// address 10.77.0.1), in a run that spans hosts, is listened on alone, not on
// every interface as before; the other host's rank meets it there.
TEST_F(HostsInNamespaces, RankZerosStoreListensOnTheAddressItsMasterNameHasHere) {
  std::string output;
  for (int host = 0; host < 2; ++host) {
    ASSERT_EQ(RunCommand({kScript, "name", prefix_, std::to_string(host), kMaster + " node0.test"},
                         10s, &output),
              0)
        << output;
  }
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  auto start_rank = [&](int rank) {
    ranks.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{
            "ip", "netns", "exec", Namespace(rank), "env", "RANK=" + std::to_string(rank),
            "GROUP_RANK=" + std::to_string(rank), "WORLD_SIZE=2", "LOCAL_RANK=0",
            "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=node0.test", "MASTER_PORT=29500",
            "INFINI_CCL_TIMEOUT_S=30", kBinDir + "/parallel_check", "--ccl_backend=gloo",
            "--tensor_parallel=1", "--pipeline_parallel=1"},
        std::vector<std::string>{"GLOO_SOCKET_IFNAME="},
        scratch_.path() + "/rank" + std::to_string(rank) + ".log"));
  };
  start_rank(0);
  std::string listening;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (listening.find(":29500") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    listening.clear();
    RunCommand({"ip", "netns", "exec", Namespace(0), "ss", "-ltnH", "sport = :29500"}, 10s,
               &listening);
    if (listening.find(":29500") == std::string::npos) std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(listening.find(kMaster + ":29500"), std::string::npos) << listening;
  EXPECT_EQ(listening.find("0.0.0.0:29500"), std::string::npos) << listening;
  EXPECT_EQ(listening.find("*:29500"), std::string::npos) << listening;
  EXPECT_NE(RunCommand({"ip", "netns", "exec", Namespace(0), "bash", "-c",
                        "exec 3<>/dev/tcp/127.0.0.1/29500"},
                       10s),
            0)
      << "rank 0's store answers on 127.0.0.1 too";
  start_rank(1);
  for (auto& rank : ranks) {
    const ExitReport report = rank->Wait(90s);
    ASSERT_TRUE(report.exited) << rank->Output();
    EXPECT_EQ(report.exit_code, 0) << rank->Output();
    EXPECT_EQ(rank->Output().find("every interface"), std::string::npos) << rank->Output();
  }
}

// --on_failure=shrink on three hosts (one rank each): host 2's link is cut
// while shrink_check's all-reduces run. Only the side that holds the store
// goes on: node 0 publishes node 2's rank as lost, nodes 0 and 1 recover in
// place and finish in a world of two (exit 0); node 2 loses node 0's store
// and stops its rank with one line (exit non-zero).
TEST_F(HostsInNamespaces, APartitionUnderShrinkLeavesTheSideWithTheStoreRunning) {
  // Rank 0 paces the steps (about 8 s of them), so that the cut lands mid-run.
  const std::vector<std::string> program = {
      "sh", "-c",
      "echo \"rank $RANK started\"; exec " + kBinDir +
          "/shrink_check --steps=40 --slow_rank=0 --slow_ms=200"};
  const std::vector<std::string> flags = {RdzvConf("heartbeat_timeout=2"), "--on_failure=shrink",
                                          "--term_timeout=2"};
  ChildProcess& node0 = StartNode(0, 3, flags, program);
  ChildProcess& node1 = StartNode(1, 3, flags, program);
  ChildProcess& node2 = StartNode(2, 3, flags, program);
  for (ChildProcess* node : {&node0, &node1, &node2}) {
    ASSERT_TRUE(node->WaitForOutput(" started", 60s)) << node->Output();
  }
  std::this_thread::sleep_for(3s);  // past the ranks' first steps
  std::string output;
  ASSERT_EQ(RunCommand({kScript, "cut", prefix_, "2"}, 10s, &output), 0) << output;
  const auto cut_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(node0.WaitForOutput("published as lost", 30s)) << node0.Output();
  const auto published = std::chrono::steady_clock::now() - cut_at;
  const ExitReport cut = node2.Wait(30s);
  const auto cut_side_stopped = std::chrono::steady_clock::now() - cut_at;
  const ExitReport first = node0.Wait(90s);
  const ExitReport second = node1.Wait(30s);
  ASSERT_TRUE(first.exited && second.exited && cut.exited)
      << node0.Output() << node1.Output() << node2.Output();
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  std::printf(
      "partition under shrink: loss published %lld ms, the cut side stopped %lld ms "
      "after the cut\n",
      static_cast<long long>(duration_cast<milliseconds>(published).count()),
      static_cast<long long>(duration_cast<milliseconds>(cut_side_stopped).count()));
  EXPECT_EQ(first.exit_code, 0) << node0.Output();
  EXPECT_EQ(second.exit_code, 0) << node1.Output();
  EXPECT_NE(cut.exit_code, 0) << node2.Output();
  EXPECT_NE(node2.Output().find("lost the rendezvous store at " + kMaster), std::string::npos)
      << node2.Output();
  EXPECT_NE(node2.Output().find("stopped this node's ranks"), std::string::npos) << node2.Output();
  for (const ChildProcess* node : {&node0, &node1}) {
    EXPECT_NE(node->Output().find("node 2 (host "), std::string::npos) << node->Output();
    EXPECT_NE(node->Output().find("ranks 2 published as lost, 2 ranks go on"), std::string::npos)
        << node->Output();
    EXPECT_NE(node->Output().find("1 node lost, the run finished without them"), std::string::npos)
        << node->Output();
  }
  EXPECT_NE(node0.Output().find("rank 0: done world=2 rank=0 steps=40 recoveries=1"),
            std::string::npos)
      << node0.Output();
  EXPECT_NE(node1.Output().find("rank 1: done world=2 rank=1 steps=40 recoveries=1"),
            std::string::npos)
      << node1.Output();
  EXPECT_TRUE(NoProcessLeft());
}

}  // namespace
