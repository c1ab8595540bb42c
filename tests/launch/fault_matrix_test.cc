// The fault matrix (docs/reliability.md): each case is a real run of
// infini_run that something goes wrong in, checked for its outcome, its exit
// code, the time to a clean stop (generous bounds that catch a hang, never
// speed) and that no process of the run is left. Each prints one
// "FAULT <case> exit=<code> stop_ms=<ms>" line for the table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "infini/rendezvous/tcp_store.h"
#include "launcher_harness.h"
#include "store_probe.h"

namespace infini::launch::testing {
namespace {

LaunchSetup WithoutToken() {
  LaunchSetup setup;
  setup.with_token = false;
  return setup;
}

LaunchSetup WithUnreadStdout() {
  LaunchSetup setup;
  setup.stdout_unread_pipe = true;
  return setup;
}

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

std::vector<std::string> Concat(std::vector<std::string> first,
                                const std::vector<std::string>& second) {
  first.insert(first.end(), second.begin(), second.end());
  return first;
}

std::vector<std::string> Child(const TempDir& dir, const std::vector<std::string>& flags = {}) {
  return Concat({"--", ChildPath(), "--dir=" + dir.path()}, flags);
}

long long Ms(Clock::duration duration) {
  return std::chrono::duration_cast<milliseconds>(duration).count();
}

void Report(const std::string& name, int exit_code, long long stop_ms) {
  printf("FAULT %s exit=%d stop_ms=%lld\n", name.c_str(), exit_code, stop_ms);
}

// Waits for `launcher` from the moment of the fault; returns its result with
// `elapsed` measured from `fault`.
LauncherResult WaitFrom(LauncherProcess& launcher, Clock::time_point fault, seconds bound) {
  LauncherResult result = launcher.Wait(bound + seconds(60));
  result.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - fault);
  return result;
}

std::vector<std::string> NodeFlags(int port, const std::string& run_id, int node_rank,
                                   int nnodes = 2) {
  return {"--nnodes=" + std::to_string(nnodes),
          "--nproc_per_node=2",
          "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
          "--rdzv_id=" + run_id,
          "--rdzv_timeout=30",
          "--rdzv_conf=heartbeat_timeout=1",
          "--term_timeout=2",
          "--node_rank=" + std::to_string(node_rank)};
}

TEST(FaultMatrix, RankExitNonZeroStopsTheOthers) {
  TempDir dir;
  LauncherResult result = RunLauncher(
      Concat({"--nproc_per_node=3", "--term_timeout=5"},
             Child(dir,
                   {"--fail_rank=1", "--exit_code=7", "--fail_after_ms=300", "--sleep_ms=60000"})),
      seconds(30));
  Report("rank_exit_nonzero", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 7) << result.err;
  EXPECT_THAT(result.err, HasSubstr("first failure: rank 1"));
  EXPECT_LT(result.elapsed, seconds(15));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, RankSegfaultGives139) {
  TempDir dir;
  LauncherResult result = RunLauncher(
      Concat(
          {"--nproc_per_node=2", "--term_timeout=5"},
          Child(dir, {"--fail_rank=0", "--segfault", "--fail_after_ms=200", "--sleep_ms=60000"})),
      seconds(30));
  Report("rank_segfault", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 128 + SIGSEGV) << result.err;
  EXPECT_THAT(result.err, HasSubstr("SIGSEGV"));
  EXPECT_LT(result.elapsed, seconds(15));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, RankKilledBySigkillGives137) {
  TempDir dir;
  LauncherProcess launcher(
      Concat({"--nproc_per_node=2", "--term_timeout=5"}, Child(dir, {"--sleep_ms=60000"})));
  pid_t rank1 = FindRankPid(launcher.pid(), 1);
  ASSERT_GT(rank1, 0);
  auto fault = Clock::now();
  kill(rank1, SIGKILL);
  LauncherResult result = WaitFrom(launcher, fault, seconds(15));
  Report("rank_sigkill", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 128 + SIGKILL) << result.err;
  EXPECT_THAT(result.err, HasSubstr("first failure: rank 1"));
  EXPECT_LT(result.elapsed, seconds(15));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, RankStoppedTooLongIsTheFailureNamed) {
  TempDir dir;
  LauncherProcess launcher(
      Concat({"--nproc_per_node=3", "--term_timeout=2", "--rdzv_conf=heartbeat_timeout=1"},
             Child(dir, {"--sleep_ms=60000"})));
  pid_t rank2 = FindRankPid(launcher.pid(), 2);
  ASSERT_GT(rank2, 0);
  auto fault = Clock::now();
  kill(rank2, SIGSTOP);
  LauncherResult result = WaitFrom(launcher, fault, seconds(15));
  Report("rank_sigstop", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 128 + SIGSTOP) << result.err;
  EXPECT_THAT(result.err, HasSubstr("first failure: rank 2"));
  EXPECT_THAT(result.err, HasSubstr("stopped by SIGSTOP"));
  EXPECT_LT(result.elapsed, seconds(15));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, HungRankIgnoringSigtermIsKilledAfterTermTimeout) {
  TempDir dir;
  LauncherProcess launcher(Concat({"--nproc_per_node=2", "--term_timeout=1"},
                                  Child(dir, {"--sleep_ms=60000", "--ignore_sigterm"})));
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 2));
  auto fault = Clock::now();
  kill(launcher.pid(), SIGTERM);
  LauncherResult result = WaitFrom(launcher, fault, seconds(15));
  Report("rank_hang_launcher_sigterm", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  EXPECT_LT(result.elapsed, seconds(15));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, LauncherCtrlCGives130) {
  TempDir dir;
  LauncherProcess launcher(
      Concat({"--nproc_per_node=2", "--term_timeout=5"}, Child(dir, {"--sleep_ms=60000"})));
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 2));
  auto fault = Clock::now();
  kill(launcher.pid(), SIGINT);
  LauncherResult result = WaitFrom(launcher, fault, seconds(10));
  Report("launcher_sigint", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 130) << result.err;
  EXPECT_LT(result.elapsed, seconds(10));
  EXPECT_TRUE(NoProcessLeft());
}

class DescendantsTest : public ::testing::TestWithParam<bool> {};

// setsid daemons and grandchildren of ranks end with the run, with the PID
// namespace (true) and with the subreaper alone (false).
TEST_P(DescendantsTest, DaemonsAndGrandchildrenEndWithTheRun) {
  const bool pid_namespace = GetParam();
  TempDir dir;
  LaunchSetup setup;
  if (!pid_namespace) setup.extra_environment.push_back("INFINI_RUN_PID_NAMESPACE=0");
  LauncherProcess launcher(
      Concat({"--nproc_per_node=2"}, Child(dir, {"--daemon", "--grandchild", "--sleep_ms=300"})),
      setup);
  LauncherResult result = launcher.Wait(seconds(30));
  Report(pid_namespace ? "daemons_end_with_run_pidns" : "daemons_end_with_run_subreaper",
         result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/0.daemon")) << "the daemon started";
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/1.grandchild")) << "the grandchild started";
  EXPECT_TRUE(NoProcessLeft(seconds(5)));
}

INSTANTIATE_TEST_SUITE_P(PidNamespaceOrSubreaper, DescendantsTest, ::testing::Bool());

TEST(FaultMatrix, LauncherSigkillTakesDaemonsAndGrandchildrenAlong) {
  TempDir dir;
  LauncherProcess launcher(
      Concat({"--nproc_per_node=2"},
             Child(dir, {"--daemon", "--grandchild", "--sleep_ms=60000", "--ignore_sigterm"})));
  auto started = Clock::now();
  while (!(std::filesystem::exists(dir.path() + "/1.daemon") &&
           std::filesystem::exists(dir.path() + "/1.grandchild")) &&
         Clock::now() - started < seconds(20)) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(std::filesystem::exists(dir.path() + "/1.daemon"));
  auto fault = Clock::now();
  kill(launcher.pid(), SIGKILL);
  launcher.Wait(seconds(10));
  const bool none_left = NoProcessLeft(seconds(10));
  Report("launcher_sigkill", 137, Ms(Clock::now() - fault));
  EXPECT_TRUE(none_left) << "needs the PID namespace (root): docs/reliability.md";
}

// Runs without a PID namespace, where the ranks' watcher (rank_watcher.h)
// keeps the promise: as the user nobody (clone(CLONE_NEWPID) is refused, as
// for any unprivileged user; the launcher is not told), or as root with
// INFINI_RUN_PID_NAMESPACE=0.
enum class WithoutNamespace { kAsNobody, kForcedOff };

class NoPidNamespaceTest : public ::testing::TestWithParam<WithoutNamespace> {
 protected:
  void SetUp() override {
    if (AsNobody() && !CanRunAsNobody()) {
      GTEST_SKIP() << "needs /usr/bin/setpriv (util-linux) and the user nobody";
    }
    OpenToEveryone(dir_);
  }
  bool AsNobody() const { return GetParam() == WithoutNamespace::kAsNobody; }
  LaunchSetup CaseSetup() const {
    LaunchSetup setup;
    setup.as_nobody = AsNobody();
    if (!AsNobody()) setup.extra_environment.push_back("INFINI_RUN_PID_NAMESPACE=0");
    return setup;
  }
  std::string Case(const std::string& what) const {
    return what + (AsNobody() ? "_nobody" : "_forced_off");
  }
  // The pid written in `name` under the run's folder, once it is there.
  pid_t PidIn(const std::string& name, seconds bound = seconds(20)) const {
    const std::string path = dir_.path() + "/" + name;
    auto deadline = Clock::now() + bound;
    while (!std::filesystem::exists(path) && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    return static_cast<pid_t>(std::atoi(ReadFile(path).c_str()));
  }
  // Ranks, grandchildren and double-forked setsid daemons of both ranks.
  std::vector<pid_t> EveryDescendant() const {
    std::vector<pid_t> pids;
    for (const char* name :
         {"0.0.pid", "1.0.pid", "0.grandchild", "1.grandchild", "0.daemon", "1.daemon"}) {
      pids.push_back(PidIn(name));
    }
    return pids;
  }
  // Whether they are ours to look at: alive, in our PID namespace, and run by
  // nobody when the launcher is.
  void ExpectAliveOutsideAnyNamespace(const std::vector<pid_t>& pids) const {
    const passwd* nobody = getpwnam("nobody");
    for (pid_t pid : pids) {
      ASSERT_GT(pid, 0);
      EXPECT_FALSE(ProcessGone(pid)) << pid;
      EXPECT_TRUE(InOurPidNamespace(pid)) << pid << ": no PID namespace on this path";
      if (AsNobody() && geteuid() == 0 && nobody) {
        EXPECT_EQ(UidOf(pid), long{nobody->pw_uid});
      }
    }
  }

  TempDir dir_;
};

std::string Survivors(const std::vector<pid_t>& pids) {
  std::string alive;
  for (pid_t pid : pids) {
    if (!ProcessGone(pid)) alive += " " + std::to_string(pid);
  }
  return alive;
}

// Issue 18 item 6: the launcher is SIGKILLed, so nothing of it can clean up;
// its ranks, their grandchildren and their double-forked setsid daemons
// (which escape every process group) must all be gone within 5 s.
TEST_P(NoPidNamespaceTest, LauncherSigkillLeavesNoRankGrandchildOrDaemon) {
  LauncherProcess launcher(
      Concat({"--nproc_per_node=2"},
             Child(dir_, {"--daemon", "--grandchild", "--sleep_ms=60000", "--ignore_sigterm"})),
      CaseSetup());
  const std::vector<pid_t> pids = EveryDescendant();
  ExpectAliveOutsideAnyNamespace(pids);
  auto fault = Clock::now();
  kill(launcher.pid(), SIGKILL);
  launcher.Wait(seconds(10));
  while (!Survivors(pids).empty() && Clock::now() - fault < seconds(5)) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  const long long stop_ms = Ms(Clock::now() - fault);
  Report(Case("launcher_sigkill"), 137, stop_ms);
  EXPECT_EQ(Survivors(pids), "") << "alive 5 s after the launcher's SIGKILL";
  EXPECT_TRUE(NoProcessLeft(seconds(5))) << "the watcher ends too";
}

TEST_P(NoPidNamespaceTest, ARankFailureStopsTheOthersAndTheirDescendants) {
  LauncherProcess launcher(
      Concat({"--nproc_per_node=3", "--term_timeout=5"},
             Child(dir_, {"--daemon", "--grandchild", "--fail_rank=1", "--exit_code=7",
                          "--fail_after_ms=500", "--sleep_ms=60000"})),
      CaseSetup());
  const std::vector<pid_t> pids = EveryDescendant();
  LauncherResult result = launcher.Wait(seconds(30));
  Report(Case("rank_exit_nonzero"), result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 7) << result.err;
  EXPECT_THAT(result.err, HasSubstr("first failure: rank 1"));
  EXPECT_THAT(result.err, HasSubstr("exit code 7"));
  EXPECT_LT(result.elapsed, seconds(15));
  EXPECT_EQ(Survivors(pids), "");
  EXPECT_TRUE(NoProcessLeft(seconds(5)));
}

TEST_P(NoPidNamespaceTest, CtrlCGives130AndLeavesNothing) {
  LauncherProcess launcher(Concat({"--nproc_per_node=2", "--term_timeout=5"},
                                  Child(dir_, {"--daemon", "--grandchild", "--sleep_ms=60000"})),
                           CaseSetup());
  const std::vector<pid_t> pids = EveryDescendant();
  auto fault = Clock::now();
  kill(launcher.pid(), SIGINT);
  LauncherResult result = WaitFrom(launcher, fault, seconds(10));
  Report(Case("launcher_sigint"), result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 130) << result.err;
  EXPECT_LT(result.elapsed, seconds(10));
  EXPECT_EQ(Survivors(pids), "");
  EXPECT_TRUE(NoProcessLeft(seconds(5)));
}

// The watcher is the ranks' parent: it reports how they ended, stops included.
TEST_P(NoPidNamespaceTest, ExitStatusesAndStopsReachTheLauncher) {
  {
    LauncherProcess launcher(
        Concat({"--nproc_per_node=2", "--term_timeout=5"}, Child(dir_, {"--sleep_ms=60000"})),
        CaseSetup());
    pid_t rank1 = FindRankPid(launcher.pid(), 1);
    ASSERT_GT(rank1, 0);
    auto fault = Clock::now();
    kill(rank1, SIGKILL);
    LauncherResult result = WaitFrom(launcher, fault, seconds(15));
    Report(Case("rank_sigkill"), result.exit_code, result.elapsed.count());
    EXPECT_EQ(result.exit_code, 128 + SIGKILL) << result.err;
    EXPECT_THAT(result.err, HasSubstr("first failure: rank 1"));
    EXPECT_THAT(result.err, HasSubstr("SIGKILL"));
  }
  {
    LauncherProcess launcher(
        Concat({"--nproc_per_node=3", "--term_timeout=2", "--rdzv_conf=heartbeat_timeout=1"},
               Child(dir_, {"--sleep_ms=60000"})),
        CaseSetup());
    pid_t rank2 = FindRankPid(launcher.pid(), 2);
    ASSERT_GT(rank2, 0);
    auto fault = Clock::now();
    kill(rank2, SIGSTOP);
    LauncherResult result = WaitFrom(launcher, fault, seconds(15));
    Report(Case("rank_sigstop"), result.exit_code, result.elapsed.count());
    EXPECT_EQ(result.exit_code, 128 + SIGSTOP) << result.err;
    EXPECT_THAT(result.err, HasSubstr("stopped by SIGSTOP"));
  }
  {
    LauncherProcess launcher(
        Concat({"--nproc_per_node=2"},
               Child(dir_, {"--fail_rank=0", "--segfault", "--fail_after_ms=100"})),
        CaseSetup());
    LauncherResult result = launcher.Wait(seconds(30));
    EXPECT_EQ(result.exit_code, 128 + SIGSEGV) << result.err;
  }
  EXPECT_TRUE(NoProcessLeft(seconds(5)));
}

// A normal end takes daemons and grandchildren along, restarts work, and a
// rank that ended is reaped at once (no zombie while the others run).
TEST_P(NoPidNamespaceTest, NormalEndsRestartsAndNoZombies) {
  {
    LauncherProcess launcher(
        Concat({"--nproc_per_node=2"},
               Child(dir_, {"--daemon", "--grandchild", "--long_from=1", "--sleep_ms=3000"})),
        CaseSetup());
    const std::vector<pid_t> pids = EveryDescendant();
    const pid_t rank0 = pids[0];  // exits at once, rank 1 sleeps 3 s
    auto deadline = Clock::now() + seconds(2);
    while (std::filesystem::exists("/proc/" + std::to_string(rank0)) && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(5));
    }
    EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(rank0)))
        << "rank 0 ended but was not reaped (a zombie)";
    LauncherResult result = launcher.Wait(seconds(30));
    Report(Case("daemons_end_with_run"), result.exit_code, result.elapsed.count());
    EXPECT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(Survivors(pids), "");
  }
  {
    TempDir restarts;
    OpenToEveryone(restarts);
    LauncherProcess launcher(Concat({"--nproc_per_node=2", "--max_restarts=2", "--term_timeout=2"},
                                    Child(restarts, {"--fail_rank=1", "--fail_attempts=2",
                                                     "--exit_code=4", "--fail_after_ms=100"})),
                             CaseSetup());
    LauncherResult result = launcher.Wait(seconds(30));
    EXPECT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(RecordedEnvironment(restarts.path(), 0, 2)["TORCHELASTIC_RESTART_COUNT"], "2");
  }
  EXPECT_TRUE(NoProcessLeft(seconds(5)));
}

INSTANTIATE_TEST_SUITE_P(FaultMatrix, NoPidNamespaceTest,
                         ::testing::Values(WithoutNamespace::kAsNobody,
                                           WithoutNamespace::kForcedOff),
                         [](const ::testing::TestParamInfo<WithoutNamespace>& param) {
                           return param.param == WithoutNamespace::kAsNobody ? "AsNobody"
                                                                             : "ForcedOff";
                         });

TEST(FaultMatrix, NodeLostWhileJoiningStopsTheOthers) {
  TempDir dir;
  const int port = FreePort();
  LauncherProcess node0(Concat(NodeFlags(port, "join", 0, 3), Child(dir)));
  LauncherProcess node1(Concat(NodeFlags(port, "join", 1, 3), Child(dir)));
  ASSERT_TRUE(WaitForStoreKey(port, "infini_run/heartbeat/1", seconds(20)));
  auto fault = Clock::now();
  kill(node1.pid(), SIGKILL);
  LauncherResult result = WaitFrom(node0, fault, seconds(15));
  Report("node_lost_joining", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("node 1 lost"));
  EXPECT_LT(result.elapsed, seconds(15)) << "heartbeat_timeout=1, not --rdzv_timeout=30";
  EXPECT_TRUE(RecordedPids(dir.path()).empty()) << "no rank started";
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, NodeLostWhileRunningStopsTheOthers) {
  TempDir dir;
  const int port = FreePort();
  LauncherProcess node0(Concat(NodeFlags(port, "running", 0), Child(dir, {"--sleep_ms=60000"})));
  LauncherProcess node1(Concat(NodeFlags(port, "running", 1), Child(dir, {"--sleep_ms=60000"})));
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 4));
  auto fault = Clock::now();
  kill(node1.pid(), SIGKILL);
  LauncherResult result = WaitFrom(node0, fault, seconds(15));
  Report("node_lost_running", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("node 1 lost"));
  EXPECT_LT(result.elapsed, seconds(15));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, NodeLostAfterOurRanksFinishedStopsUs) {
  TempDir dir;
  const int port = FreePort();
  // Node 0's ranks (0, 1) exit at once; node 1's (2, 3) run on.
  auto child = Child(dir, {"--long_from=2", "--sleep_ms=60000"});
  LauncherProcess node0(Concat(NodeFlags(port, "after", 0), child));
  LauncherProcess node1(Concat(NodeFlags(port, "after", 1), child));
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 4));
  ASSERT_TRUE(WaitForRecord(port, NodeDone(0), seconds(20)));
  auto fault = Clock::now();
  kill(node1.pid(), SIGKILL);
  LauncherResult result = WaitFrom(node0, fault, seconds(15));
  Report("node_lost_after_finish", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("node 1 lost"));
  EXPECT_LT(result.elapsed, seconds(15));
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, StalledStoreIsNoticedWithinTheHeartbeatTimeout) {
  TempDir dir;
  const int port = FreePort();
  LauncherProcess node0(Concat(NodeFlags(port, "stall", 0), Child(dir, {"--sleep_ms=60000"})));
  LauncherProcess node1(Concat(NodeFlags(port, "stall", 1), Child(dir, {"--sleep_ms=60000"})));
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 4));
  auto fault = Clock::now();
  kill(node0.pid(), SIGSTOP);
  LauncherResult result = WaitFrom(node1, fault, seconds(15));
  kill(node0.pid(), SIGCONT);
  LauncherResult result0 = node0.Wait(seconds(30));
  Report("store_stalled", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("lost the rendezvous store"));
  EXPECT_LT(result.elapsed, seconds(15));
  EXPECT_NE(result0.exit_code, 0) << "node 0, continued, finds node 1 gone: " << result0.err;
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, CtrlCIsObeyedWhileTheStoreIsStalled) {
  TempDir dir;
  const int port = FreePort();
  auto flags = [&](int node) {
    auto node_flags = NodeFlags(port, "stallint", node);
    node_flags[5] = "--rdzv_conf=heartbeat_timeout=30";  // the stall is not noticed first
    return Concat(node_flags, Child(dir, {"--sleep_ms=60000"}));
  };
  LauncherProcess node0(flags(0));
  LauncherProcess node1(flags(1));
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 4));
  kill(node0.pid(), SIGSTOP);
  std::this_thread::sleep_for(milliseconds(300));  // let node 1's link block on the stalled store
  auto fault = Clock::now();
  kill(node1.pid(), SIGINT);
  LauncherResult result = WaitFrom(node1, fault, seconds(10));
  kill(node0.pid(), SIGCONT);
  kill(node0.pid(), SIGINT);
  node0.Wait(seconds(30));
  Report("store_stalled_ctrl_c", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 130) << result.err;
  EXPECT_LT(result.elapsed, seconds(10));
  EXPECT_TRUE(NoProcessLeft(seconds(20)));
}

TEST(FaultMatrix, CtrlCWhileJoiningExitsAtOnce) {
  const int port = FreePort();
  LauncherProcess joiner(Concat(NodeFlags(port, "nohost", 1), {"/bin/true"}));
  std::this_thread::sleep_for(milliseconds(500));  // it is retrying the endpoint now
  auto fault = Clock::now();
  kill(joiner.pid(), SIGINT);
  LauncherResult result = WaitFrom(joiner, fault, seconds(5));
  Report("ctrl_c_while_joining", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 130) << result.err;
  EXPECT_LT(result.elapsed, seconds(5)) << "not --rdzv_timeout=30";
}

TEST(FaultMatrix, PortTakenIsOneClearLine) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int port = FreePort();
  address.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  for (const auto& flags : {std::vector<std::string>{"--master_port=" + std::to_string(port)},
                            NodeFlags(port, "taken", 0)}) {
    LauncherResult result = RunLauncher(Concat(flags, {"/bin/true"}), seconds(20));
    Report("port_taken", result.exit_code, result.elapsed.count());
    EXPECT_EQ(result.exit_code, 1) << result.err;
    EXPECT_THAT(result.err, HasSubstr(std::to_string(port)));
    EXPECT_EQ(Lines(result.err).size(), 1u) << result.err;
  }
  close(fd);
}

TEST(FaultMatrix, ASecondRunWithTheSameIdNeverTouchesTheFirstsLogs) {
  TempDir dir, logs;
  auto flags = Concat({"--nproc_per_node=2", "--log_dir=" + logs.path(), "--rdzv_id=same"},
                      Child(dir, {"--print=first"}));
  ASSERT_EQ(RunLauncher(flags).exit_code, 0);
  const std::string first_log = logs.path() + "/same/attempt_0/rank_0/stdout.log";
  ASSERT_EQ(ReadFile(first_log), "first\n");
  flags.back() = "--print=second";
  LauncherResult second = RunLauncher(flags);
  Report("same_run_id_same_log_dir", second.exit_code, second.elapsed.count());
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_THAT(second.err, HasSubstr("already exists"));
  EXPECT_EQ(Lines(second.err).size(), 1u) << second.err;
  EXPECT_EQ(ReadFile(first_log), "first\n") << "never truncated";
  struct stat info {};
  ASSERT_EQ(stat(first_log.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((logs.path() + "/same/attempt_0").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, ASymlinkInTheLogFolderIsNotFollowed) {
  TempDir dir, logs, elsewhere;
  std::filesystem::create_directory_symlink(elsewhere.path(), logs.path() + "/planted");
  LauncherResult result = RunLauncher(
      Concat({"--nproc_per_node=1", "--log_dir=" + logs.path(), "--rdzv_id=planted"}, Child(dir)));
  Report("symlink_in_log_dir", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("symlink"));
  EXPECT_TRUE(std::filesystem::is_empty(elsewhere.path())) << "nothing written through it";
}

TEST(FaultMatrix, ConcurrentRunsOnOneMachineDoNotCollide) {
  TempDir first_dir, second_dir, logs;
  LauncherProcess first(Concat({"--nproc_per_node=2", "--log_dir=" + logs.path()},
                               Child(first_dir, {"--sleep_ms=500"})),
                        WithoutToken());
  LauncherProcess second(Concat({"--nproc_per_node=2", "--log_dir=" + logs.path()},
                                Child(second_dir, {"--sleep_ms=500"})),
                         WithoutToken());
  LauncherResult first_result = first.Wait(), second_result = second.Wait();
  Report("concurrent_runs", second_result.exit_code, second_result.elapsed.count());
  EXPECT_EQ(first_result.exit_code, 0) << first_result.err;
  EXPECT_EQ(second_result.exit_code, 0) << second_result.err;
  auto first_env = RecordedEnvironment(first_dir.path(), 0);
  auto second_env = RecordedEnvironment(second_dir.path(), 0);
  EXPECT_NE(first_env["INFINI_STORE_PORT"], second_env["INFINI_STORE_PORT"]);
  EXPECT_NE(first_env["INFINI_RUN_TOKEN"], second_env["INFINI_RUN_TOKEN"]);
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, RestartsAfterARankFailure) {
  TempDir dir;
  LauncherResult result = RunLauncher(Concat(
      {"--nproc_per_node=2", "--max_restarts=2", "--term_timeout=2"},
      Child(dir, {"--fail_rank=1", "--fail_attempts=2", "--exit_code=4", "--fail_after_ms=100"})));
  Report("restarts", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(RecordedEnvironment(dir.path(), 0, 2)["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(RecordedEnvironment(dir.path(), 0, 2)["TORCHELASTIC_MAX_RESTARTS"], "2");
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, AStrangerWithoutTheTokenIsRefused) {
  TempDir dir;
  LauncherProcess launcher(Concat({"--nproc_per_node=1"}, Child(dir, {"--sleep_ms=60000"})),
                           WithoutToken());
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 1));
  auto env = RecordedEnvironment(dir.path(), 0);
  EXPECT_EQ(env["INFINI_RUN_TOKEN"].size(), 64u)
      << "a fresh secret per run: 32 random bytes in hex";
  const auto port = static_cast<uint16_t>(std::stoi(env["INFINI_STORE_PORT"]));
  bool refused = false;
  try {
    auto stranger = rendezvous::TcpStoreClient::Connect("127.0.0.1", port, milliseconds(2000),
                                                        "not-the-secret");
    stranger->Set("infini_run/failure", "0\n0\nforged");
  } catch (const rendezvous::StoreError&) {
    refused = true;
  }
  kill(launcher.pid(), SIGINT);
  LauncherResult result = launcher.Wait(seconds(10));
  Report("stranger_without_token", result.exit_code, result.elapsed.count());
  EXPECT_TRUE(refused);
  EXPECT_EQ(result.exit_code, 130) << "the forged failure changed nothing: " << result.err;
  EXPECT_TRUE(NoProcessLeft());
}

// Something else took the rendezvous port (a store without the run's token):
// a joining node holding the token refuses it before writing a key, in one
// line, instead of joining a stranger's run.
TEST(FaultMatrix, AJoiningNodeRefusesAStoreThatCannotProveTheToken) {
  rendezvous::TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  auto impostor = rendezvous::TcpStoreServer::Start(options);
  TempDir dir;
  LauncherResult result =
      RunLauncher(Concat({"--nnodes=2", "--node_rank=1", "--nproc_per_node=1",
                          "--rdzv_endpoint=127.0.0.1:" + std::to_string(impostor->port()),
                          "--rdzv_id=impostor", "--rdzv_timeout=20"},
                         Child(dir)),
                  seconds(30));
  Report("impostor_store", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("(--rdzv_endpoint) answered but is not this run's store"));
  EXPECT_THAT(result.err, HasSubstr("does not ask for the run token"));
  EXPECT_THAT(result.err, HasSubstr("INFINI_RUN_TOKEN"));
  EXPECT_LT(result.elapsed, seconds(10)) << "refused at once, not after --rdzv_timeout";
  EXPECT_EQ(impostor->num_keys(), 0u) << "nothing written to a stranger's store";
  EXPECT_TRUE(RecordedPids(dir.path()).empty()) << "no rank started";
}

TEST(FaultMatrix, AFullStdoutPipeDoesNotStopSupervision) {
  TempDir dir;
  LauncherProcess launcher(Concat({"--nproc_per_node=2", "--term_timeout=2"},
                                  Child(dir, {"--lines=20000", "--line_bytes=1000", "--fail_rank=1",
                                              "--exit_code=5", "--sleep_ms=60000"})),
                           WithUnreadStdout());
  LauncherResult result = launcher.Wait(seconds(60));
  Report("full_stdout_pipe", result.exit_code, result.elapsed.count());
  EXPECT_EQ(result.exit_code, 5) << result.err;
  EXPECT_THAT(result.err, HasSubstr("stdout is not being read"));
  EXPECT_THAT(result.err, HasSubstr("were dropped"));
  EXPECT_EQ(Lines(result.err).size(), Lines(result.err).size());
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, MultiNodeWithoutATokenWarnsOnceAndRuns) {
  TempDir dir;
  const int port = FreePort();
  LauncherProcess node0(Concat(NodeFlags(port, "open", 0), Child(dir)), WithoutToken());
  LauncherProcess node1(Concat(NodeFlags(port, "open", 1), Child(dir)), WithoutToken());
  LauncherResult result0 = node0.Wait(), result1 = node1.Wait();
  Report("multi_node_no_token", result1.exit_code, result1.elapsed.count());
  for (const LauncherResult* result : {&result0, &result1}) {
    EXPECT_EQ(result->exit_code, 0) << result->err;
    size_t warnings = 0;
    for (const std::string& line : Lines(result->err))
      warnings += line.find("warning") != std::string::npos;
    EXPECT_EQ(warnings, 1u) << result->err;
  }
  EXPECT_TRUE(NoProcessLeft());
}

TEST(FaultMatrix, HugeProductsAndMultiLineValuesAreOneLineErrors) {
  struct Case {
    std::vector<std::string> arguments;
    std::string named;
  };
  std::vector<Case> cases = {
      {{"--dry_run", "--nnodes=1048576", "--nproc_per_node=4096", "--rdzv_id=x",
        "--rdzv_endpoint=127.0.0.1:1", "/bin/true"},
       "4294967296 ranks"},
      {{"--rdzv_id=bad\nid", "/bin/true"}, "bad\\nid"},
      {{"--rdzv_conf=no_such_key=1", "/bin/true"}, "no_such_key"},
      {{"--rdzv_conf=heartbeat_timeout=0", "/bin/true"}, "heartbeat_timeout"},
      {{"--rdzv_conf=token_file=/nonexistent/secret", "/bin/true"}, "token_file"},
      {{"--start_method=thread", "/bin/true"}, "--start_method"},
      {{"--logs_specs=custom", "/bin/true"}, "--logs_specs"},
  };
  for (const Case& bad : cases) {
    LauncherResult result = RunLauncher(bad.arguments, seconds(10));
    Report("bad_input", result.exit_code, result.elapsed.count());
    EXPECT_EQ(result.exit_code, 2) << result.err;
    EXPECT_EQ(Lines(result.err).size(), 1u) << result.err;
    EXPECT_THAT(result.err, HasSubstr(bad.named));
    EXPECT_EQ(result.out, "");
  }
}

TEST(TorchrunParity, StaticFormWithoutRdzvIdDerivesTheRunIdFromTheEndpoint) {
  TempDir dir;
  const int port = FreePort();
  auto flags = [&](int node) {
    return Concat(
        {"--nnodes=2", "--nproc_per_node=1", "--node_rank=" + std::to_string(node),
         "--master_addr=127.0.0.1", "--master_port=" + std::to_string(port), "--rdzv_timeout=20"},
        Child(dir));
  };
  LauncherProcess node0(flags(0)), node1(flags(1));
  LauncherResult result0 = node0.Wait(), result1 = node1.Wait();
  EXPECT_EQ(result0.exit_code, 0) << result0.err;
  EXPECT_EQ(result1.exit_code, 0) << result1.err;
  for (int rank = 0; rank < 2; ++rank) {
    auto env = RecordedEnvironment(dir.path(), rank);
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "static-127.0.0.1-" + std::to_string(port));
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
  }
  EXPECT_TRUE(NoProcessLeft());
}

TEST(TorchrunParity, AgentVariablesShortFormsAndTheSecretStayOffTheCommandLine) {
  TempDir dir, logs;
  LauncherResult result =
      RunLauncher(Concat({"--nproc_per_node=2", "--role=trainer", "-r", "1", "-t=2",
                          "--log_dir=" + logs.path(), "--rdzv_id=agent", "--start_method=fork"},
                         Child(dir, {"--print=x"})));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto env = RecordedEnvironment(dir.path(), 1);
  EXPECT_EQ(env["ROLE_NAME"], "trainer");
  EXPECT_EQ(env["ROLE_RANK"], "1");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "0");
  if (!getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING")) {
    EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  }
  EXPECT_EQ(env["INFINI_RUN_TOKEN"], TestToken()) << "the given secret reaches the ranks";
  for (const std::string& word : RecordedArguments(dir.path(), 1)) {
    EXPECT_THAT(word, ::testing::Not(HasSubstr(TestToken())));
  }
  EXPECT_EQ(result.out, "") << "-r 1: stdout to the files only";
  EXPECT_EQ(ReadFile(logs.path() + "/agent/attempt_0/rank_1/stdout.log"), "x\n");
  EXPECT_THAT(result.err, ::testing::Not(HasSubstr(TestToken())));

  LauncherResult dry = RunLauncher(Concat({"--nproc_per_node=1", "--dry_run"}, Child(dir)));
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("INFINI_RUN_TOKEN='(secret)'"));
  EXPECT_THAT(dry.out, ::testing::Not(HasSubstr(TestToken())));
}

}  // namespace
}  // namespace infini::launch::testing
