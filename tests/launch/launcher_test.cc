// infini_run end to end: real launchers starting real ranks
// (launch_test_child), on one node and as two nodes on one machine. Every test
// that starts ranks also checks that none is left afterwards.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "launcher_harness.h"

namespace infini::launch::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

std::vector<std::string> Concat(std::vector<std::string> first,
                                const std::vector<std::string>& second) {
  first.insert(first.end(), second.begin(), second.end());
  return first;
}

std::vector<std::string> ChildCommand(const TempDir& dir,
                                      const std::vector<std::string>& flags = {}) {
  return Concat({"--", ChildPath(), "--dir=" + dir.path()}, flags);
}

size_t CountOccurrences(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++count;
  return count;
}

// Two launchers meeting at a free local port as nodes of one run.
std::vector<std::string> NodeFlags(int port, const std::string& run_id, int node_rank,
                                   int processes_per_node = 2) {
  std::vector<std::string> flags = {"--nnodes=2",
                                    "--nproc_per_node=" + std::to_string(processes_per_node),
                                    "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                                    "--rdzv_id=" + run_id,
                                    "--rdzv_timeout=20",
                                    "--term_timeout=5"};
  if (node_rank >= 0) flags.push_back("--node_rank=" + std::to_string(node_rank));
  return flags;
}

TEST(Launcher, EveryRankGetsTheDocumentedEnvironment) {
  TempDir dir;
  LauncherResult result = RunLauncher(
      Concat({"--nproc_per_node=8", "--ccl_backend=gloo", "--rdzv_id=envtest"}, ChildCommand(dir)));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::set<std::string> master_ports;
  for (int rank = 0; rank < 8; ++rank) {
    auto env = RecordedEnvironment(dir.path(), rank);
    const std::string r = std::to_string(rank);
    EXPECT_EQ(env["RANK"], r);
    EXPECT_EQ(env["LOCAL_RANK"], r);
    EXPECT_EQ(env["WORLD_SIZE"], "8");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "8");
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "envtest");
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["NNODES"], "1");
    EXPECT_EQ(env["NPROC_PER_NODE"], "8");
    EXPECT_EQ(env["GLOBAL_PROC_RANK"], r);
    EXPECT_EQ(env["LOCAL_PROC_RANK"], r);
    EXPECT_EQ(env["PROC_WORLD_SIZE"], "8");
    EXPECT_EQ(env["INFINI_CCL_BACKEND"], "gloo");
    EXPECT_EQ(env["INFINI_RUN_ID"], "envtest");
    EXPECT_EQ(env["INFINI_STORE_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["INFINI_RESTART_COUNT"], "0");
    if (!getenv("OMP_NUM_THREADS")) {
      EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    }
    // The program's own store port is not the launcher's.
    EXPECT_NE(env["MASTER_PORT"], env["INFINI_STORE_PORT"]);
    EXPECT_GT(std::stoi(env["MASTER_PORT"]), 0);
    EXPECT_EQ(env["PATH"], getenv("PATH")) << "the launcher's environment is inherited";
    master_ports.insert(env["MASTER_PORT"] + "/" + env["INFINI_STORE_PORT"]);
  }
  EXPECT_EQ(master_ports.size(), 1u) << "every rank sees the same ports";
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
}

TEST(Launcher, DoubleDashOrFirstWordSeparatesLauncherFlagsFromProgramFlags) {
  TempDir with_dash;
  LauncherResult result = RunLauncher(
      Concat({"--nproc-per-node=2"}, ChildCommand(with_dash, {"--nproc_per_node=5", "--", "x"})));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(RecordedEnvironment(with_dash.path(), 1)["WORLD_SIZE"], "2");
  std::vector<std::string> expected = {ChildPath(), "--dir=" + with_dash.path(),
                                       "--nproc_per_node=5", "--", "x"};
  EXPECT_EQ(RecordedArguments(with_dash.path(), 0), expected);

  TempDir without_dash;
  result = RunLauncher(
      {"--nproc_per_node", "1", ChildPath(), "--dir=" + without_dash.path(), "--nnodes=3"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(RecordedEnvironment(without_dash.path(), 0)["NNODES"], "1");
  EXPECT_EQ(RecordedArguments(without_dash.path(), 0).back(), "--nnodes=3");
}

TEST(Launcher, BadCommandLinesGiveOneLineAndExitCode2) {
  TempDir dir;
  const std::string not_executable = dir.path() + "/script.sh";
  std::ofstream(not_executable) << "#!/bin/sh\n";
  struct Case {
    std::vector<std::string> arguments;
    std::string named;  // what the line must mention
  };
  std::vector<Case> cases = {
      {{"--nproc_per_node=0", "/bin/true"}, "--nproc_per_node"},
      {{"--nproc_per_node=two", "/bin/true"}, "--nproc_per_node"},
      {{"--nnodes=2", "--node_rank=2", "--rdzv_id=x", "--rdzv_endpoint=h:1", "/bin/true"},
       "--node_rank"},
      {{"--nnodes=2", "--rdzv_id=x", "--rdzv_endpoint=:29400", "/bin/true"}, "host is missing"},
      {{"--nnodes=2", "--rdzv_id=x", "--rdzv_endpoint=host:port", "/bin/true"}, "--rdzv_endpoint"},
      {{"--master_port=abc", "/bin/true"}, "--master_port"},
      {{"--nnodes=2", "--rdzv_endpoint=h:1", "/bin/true"}, "--rdzv_id"},
      {{"--no-such-flag=1", "/bin/true"}, "--no-such-flag"},
      {{"--tee=4", "/bin/true"}, "--tee"},
      {{"--term_timeout=-1", "/bin/true"}, "--term_timeout"},
      {{"--local_ranks_filter=3", "/bin/true"}, "--local_ranks_filter"},
      {{"--nproc_per_node=1"}, "no program"},
      {{"./definitely_missing_program"}, "definitely_missing_program"},
      {{"definitely_missing_program"}, "not found in PATH"},
      {{not_executable}, "not an executable"},
      {{"--nproc_per_node"}, "needs a value"},
  };
  for (const Case& bad : cases) {
    LauncherResult result = RunLauncher(bad.arguments, seconds(10));
    std::string shown;
    for (const std::string& word : bad.arguments) shown += word + " ";
    EXPECT_EQ(result.exit_code, 2) << shown << result.err;
    EXPECT_EQ(Lines(result.err).size(), 1u) << shown << result.err;
    EXPECT_THAT(result.err, HasSubstr(bad.named)) << shown;
    EXPECT_EQ(result.out, "") << shown;
  }
}

// Every count flag has an upper bound, said in its one-line refusal with the
// flag, the value and the accepted range, exit 2 (before, the lines said
// only ">= 1" or ">= 0").
TEST(Launcher, CountFlagsAboveTheirBoundNameTheAcceptedRange) {
  struct Case {
    std::vector<std::string> arguments;
    std::string named;
  };
  const std::vector<Case> cases = {
      {{"--nproc_per_node=65537", "/bin/true"},
       "--nproc_per_node='65537': expected a number in 1..65536, or auto, gpu or cpu"},
      {{"--nproc_per_node=99999999999999999999", "/bin/true"}, "in 1..65536"},
      {{"--nnodes=1048577", "/bin/true"},
       "--nnodes='1048577': expected a number of nodes in 1..1048576"},
      {{"--max_restarts=1000001", "/bin/true"},
       "--max_restarts='1000001': expected a count in 0..1000000"},
      {{"--rdzv_conf=keep_alive_max_attempt=1001", "/bin/true"}, "a count in 1..1000"},
      {{"--rdzv_timeout=10000000", "/bin/true"},
       "--rdzv_timeout='10000000': expected a number of seconds > 0 and below 10000000"},
      {{"--term_timeout=1e9", "/bin/true"}, "below 10000000"},
      {{"--local_ranks_filter=2", "--nproc_per_node=2", "/bin/true"},
       "comma-separated local ranks below --nproc_per_node=2"},
  };
  for (const Case& bad : cases) {
    LauncherResult result = RunLauncher(bad.arguments, seconds(10));
    std::string shown;
    for (const std::string& word : bad.arguments) shown += word + " ";
    EXPECT_EQ(result.exit_code, 2) << shown << result.err;
    EXPECT_EQ(Lines(result.err).size(), 1u) << shown << result.err;
    EXPECT_THAT(result.err, HasSubstr(bad.named)) << shown;
  }
}

// A value holding a newline is echoed escaped: the error stays one line that
// names the flag and shows the value as "\n".
TEST(Launcher, ValuesWithANewlineAreEchoedEscapedOnOneLine) {
  struct Case {
    std::vector<std::string> arguments;
    std::string named;  // the flag and its escaped value
  };
  std::vector<Case> cases = {
      {{"--nproc_per_node=2\nx", "/bin/true"}, "--nproc_per_node='2\\nx'"},
      {{"--nnodes=2\nx", "/bin/true"}, "--nnodes='2\\nx'"},
      {{"--master_port=1\nx", "/bin/true"}, "--master_port='1\\nx'"},
      {{"--max_restarts=1\nx", "/bin/true"}, "--max_restarts='1\\nx'"},
      {{"--rdzv_backend=c10d\nx", "/bin/true"}, "--rdzv_backend='c10d\\nx'"},
      {{"--tee=1\r\nx", "/bin/true"}, "--tee='1\\r\\nx'"},
      {{"--bad\nflag=1", "/bin/true"}, "--bad\\nflag"},
      {{"--dry_run=ye\ns", "/bin/true"}, "--dry_run='ye\\ns'"},
      {{"./missing\nprogram"}, "./missing\\nprogram"},
  };
  for (const Case& bad : cases) {
    LauncherResult result = RunLauncher(bad.arguments, seconds(10));
    std::string shown;
    for (const std::string& word : bad.arguments) shown += word + " ";
    EXPECT_EQ(result.exit_code, 2) << shown << result.err;
    EXPECT_EQ(Lines(result.err).size(), 1u) << shown << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << shown << result.err;
    EXPECT_THAT(result.err, HasSubstr(bad.named)) << shown << result.err;
  }
}

TEST(Launcher, HelpExplainsEveryFlagWithAnExample) {
  LauncherResult result = RunLauncher({"--help"}, seconds(10));
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.out, ::testing::StartsWith("usage: infini_run "));
  // The usage wraps the help texts; compare with the whitespace folded.
  std::string help;
  for (char c : result.out + result.err) {
    bool space = c == ' ' || c == '\n';
    if (!(space && !help.empty() && help.back() == ' ')) help += space ? ' ' : c;
  }
  for (const char* flag :
       {"nnodes", "nproc_per_node", "node_rank", "master_addr", "master_port", "rdzv_endpoint",
        "rdzv_id", "rdzv_timeout", "standalone", "ccl_backend", "max_restarts", "monitor_interval",
        "log_dir", "tee", "redirects", "local_ranks_filter", "term_timeout", "dry_run"}) {
    // infini/common/usage.h's line: "--flag=VALUE (default: ...)", a switch "--flag[=BOOL]".
    const bool listed =
        help.find(std::string(" --") + flag + "=VALUE (default: ") != std::string::npos ||
        help.find(std::string(" --") + flag + "[=BOOL] (default: ") != std::string::npos;
    EXPECT_TRUE(listed) << flag;
    EXPECT_THAT(help, HasSubstr(std::string("Example: --") + flag)) << flag;
  }
}

// "Max open files" of a live process: its soft and hard limits.
std::pair<std::string, std::string> OpenFileLimits(pid_t pid) {
  std::ifstream limits("/proc/" + std::to_string(pid) + "/limits");
  std::string line;
  while (std::getline(limits, line)) {
    if (line.rfind("Max open files", 0) != 0) continue;
    std::istringstream fields(line.substr(std::string("Max open files").size()));
    std::string soft, hard;
    fields >> soft >> hard;
    return {soft, hard};
  }
  return {};
}

// The launcher's store holds a connection per rank: the launcher lifts its
// own soft open-file limit to the hard one, and its ranks keep the limit
// they were started with.
TEST(Launcher, LauncherRaisesItsOpenFileLimitAndRanksKeepTheirs) {
  rlimit original{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &original), 0);
  if (original.rlim_max != RLIM_INFINITY && original.rlim_max <= 256) {
    GTEST_SKIP() << "the hard open-file limit is " << original.rlim_max;
  }
  rlimit lowered = original;
  lowered.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  TempDir dir;
  LauncherProcess launcher(Concat({"--nproc_per_node=1"}, ChildCommand(dir, {"--sleep_ms=3000"})));
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &original), 0);
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 1));
  const auto [launcher_soft, launcher_hard] = OpenFileLimits(launcher.pid());
  // The rank's own record (its pid is one of its PID namespace).
  std::istringstream rank_limits(ReadFile(dir.path() + "/0.0.nofile"));
  std::string rank_soft, rank_hard;
  rank_limits >> rank_soft >> rank_hard;
  EXPECT_EQ(launcher_soft, launcher_hard);
  EXPECT_NE(launcher_soft, "256");
  EXPECT_EQ(rank_soft, "256");
  EXPECT_EQ(rank_hard, std::to_string(original.rlim_max));
  LauncherResult result = launcher.Wait(seconds(30));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
}

TEST(Launcher, LauncherStopsAllRanksWhenOneFails) {
  TempDir dir;
  LauncherResult result =
      RunLauncher(Concat({"--nproc_per_node=4", "--term_timeout=10"},
                         ChildCommand(dir, {"--fail_rank=2", "--exit_code=7", "--fail_after_ms=300",
                                            "--sleep_ms=60000"})),
                  seconds(30));
  EXPECT_EQ(result.exit_code, 7) << result.err;
  EXPECT_LT(result.elapsed, seconds(10)) << "ranks that honour SIGTERM stop at once";
  EXPECT_THAT(result.err, HasSubstr("first failure: rank 2"));
  EXPECT_THAT(result.err, HasSubstr("exit code 7"));
  EXPECT_THAT(result.err, HasSubstr("[rank2]:rank 2 failing on purpose"));
  EXPECT_EQ(RecordedPids(dir.path()).size(), 4u);
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
}

TEST(Launcher, RanksIgnoringSigtermAreKilledAfterTermTimeout) {
  TempDir dir;
  LauncherResult result =
      RunLauncher(Concat({"--nproc_per_node=3", "--term_timeout=0.5"},
                         ChildCommand(dir, {"--fail_rank=0", "--exit_code=3", "--fail_after_ms=200",
                                            "--sleep_ms=60000", "--ignore_sigterm"})),
                  seconds(30));
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_THAT(result.err, HasSubstr("SIGKILL"));
  EXPECT_LT(result.elapsed, seconds(20));
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
}

TEST(Launcher, RankKilledBySignalGivesExitCode128PlusSignal) {
  TempDir dir;
  LauncherResult result =
      RunLauncher(Concat({"--nproc_per_node=2", "--term_timeout=5"},
                         ChildCommand(dir, {"--fail_rank=1", "--signal=" + std::to_string(SIGUSR1),
                                            "--sleep_ms=60000"})));
  EXPECT_EQ(result.exit_code, 128 + SIGUSR1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("first failure: rank 1"));
  EXPECT_THAT(result.err, HasSubstr("SIGUSR1"));
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
}

class LauncherSignalTest : public ::testing::TestWithParam<int> {};

TEST_P(LauncherSignalTest, SignalToLauncherStopsEveryRank) {
  const int signal_number = GetParam();
  TempDir dir;
  LauncherProcess launcher(
      Concat({"--nproc_per_node=3", "--term_timeout=5"}, ChildCommand(dir, {"--sleep_ms=60000"})));
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 3));
  kill(launcher.pid(), signal_number);
  LauncherResult result = launcher.Wait(seconds(20));
  EXPECT_EQ(result.exit_code, 128 + signal_number) << result.err;
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
}

INSTANTIATE_TEST_SUITE_P(IntTermHup, LauncherSignalTest, ::testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const auto& param_info) {
                           return std::string(sigabbrev_np(param_info.param));
                         });

TEST(Launcher, RanksDieWhenTheLauncherIsKilled) {
  TempDir dir;
  LauncherProcess launcher(
      Concat({"--nproc_per_node=3"}, ChildCommand(dir, {"--sleep_ms=60000", "--ignore_sigterm"})));
  ASSERT_TRUE(WaitForPidFiles(dir.path(), 3));
  kill(launcher.pid(), SIGKILL);
  launcher.Wait(seconds(10));
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path(), seconds(10)));
}

TEST(Launcher, MaxRestartsRestartsTheWholeGroupWithTheRestartCount) {
  TempDir dir;
  LauncherResult result =
      RunLauncher(Concat({"--nproc_per_node=2", "--max_restarts=3", "--term_timeout=5"},
                         ChildCommand(dir, {"--fail_rank=1", "--fail_attempts=2", "--exit_code=4",
                                            "--fail_after_ms=300"})));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  for (int attempt = 0; attempt < 3; ++attempt) {
    for (int rank = 0; rank < 2; ++rank) {
      auto env = RecordedEnvironment(dir.path(), rank, attempt);
      EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], std::to_string(attempt)) << rank;
      EXPECT_EQ(env["INFINI_RESTART_COUNT"], std::to_string(attempt)) << rank;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/0.3.pid")) << "no fourth attempt";
  EXPECT_EQ(CountOccurrences(result.err, "restarting every rank"), 2u);
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));

  TempDir always_failing;
  result = RunLauncher(Concat({"--nproc_per_node=2", "--max_restarts=1"},
                              ChildCommand(always_failing, {"--fail_rank=0", "--exit_code=9"})));
  EXPECT_EQ(result.exit_code, 9) << "restarts spent: the failure's code";
  EXPECT_TRUE(std::filesystem::exists(always_failing.path() + "/0.1.pid"));
  EXPECT_FALSE(std::filesystem::exists(always_failing.path() + "/0.2.pid"));
}

TEST(Launcher, OutputLinesArePrefixedWholeAndLoggedPerRank) {
  TempDir dir, logs;
  const int line_bytes = 20000;  // longer than a pipe's atomic write
  LauncherResult result = RunLauncher(Concat(
      {"--nproc_per_node=3", "--log_dir=" + logs.path(), "--rdzv_id=logs"},
      ChildCommand(dir, {"--print=hello", "--lines=40",
                         "--line_bytes=" + std::to_string(line_bytes), "--partial=no-newline"})));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::map<int, int> long_lines;
  for (const std::string& line : Lines(result.out)) {
    // Every console line is "[rankN]:" and one whole line of that rank.
    ASSERT_EQ(line.rfind("[rank", 0), 0u) << line.substr(0, 80);
    size_t close = line.find("]:");
    ASSERT_NE(close, std::string::npos) << line.substr(0, 80);
    int rank = std::stoi(line.substr(5, close - 5));
    std::string body = line.substr(close + 2);
    if (body.size() == static_cast<size_t>(line_bytes)) {
      EXPECT_EQ(body, std::string(line_bytes, static_cast<char>('a' + rank))) << "mixed line";
      ++long_lines[rank];
    }
  }
  for (int rank = 0; rank < 3; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_EQ(long_lines[rank], 40);
    EXPECT_THAT(result.out, HasSubstr("[rank" + r + "]:hello\n"));
    EXPECT_THAT(result.out, HasSubstr("[rank" + r + "]:no-newline\n")) << "partial line flushed";
    EXPECT_THAT(result.err, HasSubstr("[rank" + r + "]:stderr:hello\n"));
    const std::string rank_dir = logs.path() + "/logs/attempt_0/rank_" + r;
    EXPECT_THAT(ReadFile(rank_dir + "/stdout.log"), ::testing::StartsWith("hello\n"));
    EXPECT_EQ(ReadFile(rank_dir + "/stderr.log"), "stderr:hello\n");
  }
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
}

TEST(Launcher, RedirectsAndLocalRanksFilterChooseWhatReachesTheConsole) {
  TempDir dir, logs;
  LauncherResult result =
      RunLauncher(Concat({"--nproc_per_node=3", "--log_dir=" + logs.path(), "--rdzv_id=redir",
                          "--redirects=1", "--local_ranks_filter=0,2"},
                         ChildCommand(dir, {"--print=hi"})));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "") << "stdout went to the files only";
  EXPECT_THAT(result.err, HasSubstr("[rank0]:stderr:hi"));
  EXPECT_THAT(result.err, HasSubstr("[rank2]:stderr:hi"));
  EXPECT_THAT(result.err, ::testing::Not(HasSubstr("[rank1]")));
  EXPECT_EQ(ReadFile(logs.path() + "/redir/attempt_0/rank_1/stdout.log"), "hi\n");
  EXPECT_EQ(ReadFile(logs.path() + "/redir/attempt_0/rank_1/stderr.log"), "stderr:hi\n");
}

TEST(Launcher, TwoSingleNodeRunsAtOnceDoNotCollide) {
  TempDir first_dir, second_dir, logs;
  LauncherProcess first(Concat({"--nproc_per_node=2", "--log_dir=" + logs.path()},
                               ChildCommand(first_dir, {"--sleep_ms=500"})));
  LauncherProcess second(Concat({"--nproc_per_node=2", "--log_dir=" + logs.path()},
                                ChildCommand(second_dir, {"--sleep_ms=500"})));
  ASSERT_EQ(first.Wait().exit_code, 0);
  ASSERT_EQ(second.Wait().exit_code, 0);
  auto first_env = RecordedEnvironment(first_dir.path(), 0);
  auto second_env = RecordedEnvironment(second_dir.path(), 0);
  EXPECT_NE(first_env["INFINI_RUN_ID"], second_env["INFINI_RUN_ID"]);
  EXPECT_NE(first_env["INFINI_STORE_PORT"], second_env["INFINI_STORE_PORT"]);
  EXPECT_NE(first_env["MASTER_PORT"], second_env["MASTER_PORT"]);
  EXPECT_TRUE(std::filesystem::exists(logs.path() + "/" + first_env["INFINI_RUN_ID"]));
  EXPECT_TRUE(std::filesystem::exists(logs.path() + "/" + second_env["INFINI_RUN_ID"]));
  EXPECT_TRUE(AllRecordedProcessesGone(first_dir.path()));
  EXPECT_TRUE(AllRecordedProcessesGone(second_dir.path()));
}

TEST(Launcher, DryRunPrintsEachRankAndStartsNothing) {
  TempDir dir;
  LauncherResult result =
      RunLauncher(Concat({"--nproc_per_node=2", "--dry_run", "--rdzv_id=dry"}, ChildCommand(dir)));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("RANK=1"));
  EXPECT_THAT(result.out, HasSubstr("TORCHELASTIC_RUN_ID=dry"));
  EXPECT_THAT(result.out, HasSubstr("command: " + ChildPath()));
  EXPECT_TRUE(RecordedPids(dir.path()).empty());
}

TEST(Launcher, GpuProcessCountWithoutAcceleratorsIsOneClearError) {
  // This machine's only backend is gloo, a host backend: "gpu" must not
  // silently become its one CPU "device".
  TempDir dir;
  LauncherResult result = RunLauncher(
      Concat({"--nproc_per_node=gpu", "--ccl_backend=gloo", "--dry_run"}, ChildCommand(dir)));
  EXPECT_EQ(result.exit_code, 2) << result.out;
  EXPECT_THAT(result.err, HasSubstr("--nproc_per_node=gpu: cannot count devices: "
                                    "--ccl_backend='gloo' finds no accelerator device"));
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
}

// With explicit node ranks the ranks use the run's store directly
// (--rdzv_conf=relay=0); in join order through their node's relay.
TEST(MultiNodeLauncher, TwoLaunchersFormOneWorld) {
  for (bool explicit_node_ranks : {true, false}) {
    TempDir dir;
    const int port = FreePort();
    const bool relayed = !explicit_node_ranks;
    const std::vector<std::string> relay_flag = {relayed ? "--rdzv_conf=relay=1"
                                                         : "--rdzv_conf=relay=0"};
    LauncherProcess node0(
        Concat(Concat(NodeFlags(port, "world", explicit_node_ranks ? 0 : -1), relay_flag),
               ChildCommand(dir)));
    if (!explicit_node_ranks) std::this_thread::sleep_for(milliseconds(200));  // binds first
    LauncherProcess node1(
        Concat(Concat(NodeFlags(port, "world", explicit_node_ranks ? 1 : -1), relay_flag),
               ChildCommand(dir)));
    LauncherResult result0 = node0.Wait(), result1 = node1.Wait();
    ASSERT_EQ(result0.exit_code, 0) << result0.err;
    ASSERT_EQ(result1.exit_code, 0) << result1.err;
    std::set<std::string> shared;
    std::set<std::string> ranks_stores;
    for (int rank = 0; rank < 4; ++rank) {
      auto env = RecordedEnvironment(dir.path(), rank);
      ranks_stores.insert(env["INFINI_STORE_ADDR"] + ":" + env["INFINI_STORE_PORT"]);
      EXPECT_EQ(env["RANK"], std::to_string(rank));
      EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank % 2));
      EXPECT_EQ(env["GROUP_RANK"], std::to_string(rank / 2));
      EXPECT_EQ(env["WORLD_SIZE"], "4");
      EXPECT_EQ(env["NNODES"], "2");
      if (relayed) {
        EXPECT_EQ(env["INFINI_STORE_ADDR"], "127.0.0.1");
        EXPECT_NE(env["INFINI_STORE_PORT"], std::to_string(port));
      } else {
        EXPECT_EQ(env["INFINI_STORE_PORT"], std::to_string(port));
      }
      shared.insert(env["MASTER_ADDR"] + ":" + env["MASTER_PORT"] + " " + env["INFINI_RUN_ID"]);
    }
    EXPECT_EQ(shared.size(), 1u) << "one MASTER_ADDR:MASTER_PORT and run id for the world";
    EXPECT_EQ(ranks_stores.size(), relayed ? 2u : 1u) << "a relay per node, or the run's store";
    EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
  }
}

TEST(MultiNodeLauncher, UnreachableEndpointFailsNamingIt) {
  const int port = FreePort();
  LauncherResult result = RunLauncher(
      Concat(NodeFlags(port, "lonely", 1), {"--rdzv_timeout=1", "/bin/true"}), seconds(20));
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("127.0.0.1:" + std::to_string(port)));
  EXPECT_EQ(Lines(result.err).size(), 1u) << result.err;
}

// A joining node whose node 0 is not there says what it waits for and until
// when (after 5 s, then every 30 s), and ends with one line at
// --rdzv_timeout. Before, it waited without a word.
TEST(MultiNodeLauncher, AJoiningNodeSaysWhatItWaitsForUntilItGivesUp) {
  const int port = FreePort();
  LauncherResult result = RunLauncher(
      Concat(NodeFlags(port, "lonely", 1), {"--rdzv_timeout=7", "/bin/true"}), seconds(30));
  EXPECT_EQ(result.exit_code, 1) << result.err;
  const std::vector<std::string> lines = Lines(result.err);
  ASSERT_EQ(lines.size(), 2u) << result.err;
  EXPECT_THAT(lines[0],
              AllOf(HasSubstr("infini_run: waiting for node 0's rendezvous store at 127.0.0.1:" +
                              std::to_string(port) + " (--rdzv_endpoint) since "),
                    AnyOf(HasSubstr(", 5 s ago (last try: "), HasSubstr(", 6 s ago (last try: ")),
                    HasSubstr(" (last try: Connection refused); gives up at "),
                    HasSubstr(" s (--rdzv_timeout 7 s)")));
  EXPECT_THAT(lines[1],
              HasSubstr("cannot reach the rendezvous endpoint 127.0.0.1:" + std::to_string(port)));
}

TEST(MultiNodeLauncher, NodesThatDisagreeStopWithAClearLine) {
  TempDir dir;
  const int port = FreePort();
  LauncherProcess node0(Concat(NodeFlags(port, "agree", 0, 2), ChildCommand(dir)));
  LauncherProcess node1(Concat(NodeFlags(port, "agree", 1, 3), ChildCommand(dir)));
  LauncherResult result0 = node0.Wait(), result1 = node1.Wait();
  EXPECT_EQ(result0.exit_code, 1) << result0.err;
  EXPECT_EQ(result1.exit_code, 1) << result1.err;
  for (const LauncherResult* result : {&result0, &result1}) {
    EXPECT_THAT(result->err, HasSubstr("node 1 disagrees with node 0 on --nproc_per_node"));
  }
  EXPECT_TRUE(RecordedPids(dir.path()).empty()) << "no rank started";
}

TEST(MultiNodeLauncher, TwoNodesClaimingOneNodeRankIsAnError) {
  TempDir dir;
  const int port = FreePort();
  auto flags = [&](int node_rank) {
    auto node = NodeFlags(port, "dup", node_rank, 1);
    node[0] = "--nnodes=3";
    return Concat(node, ChildCommand(dir));
  };
  LauncherProcess node0(flags(0));
  LauncherProcess node2(flags(2));
  LauncherProcess again2(flags(2));
  LauncherResult results[] = {node0.Wait(), node2.Wait(), again2.Wait()};
  for (const LauncherResult& result : results) {
    EXPECT_EQ(result.exit_code, 1) << result.err;
    EXPECT_THAT(result.err, HasSubstr("two nodes claim --node_rank=2"));
  }
}

TEST(MultiNodeLauncher, FailureOnOneNodeStopsEveryNode) {
  TempDir dir;
  const int port = FreePort();
  std::vector<std::string> child = ChildCommand(
      dir, {"--fail_rank=3", "--exit_code=6", "--fail_after_ms=300", "--sleep_ms=60000"});
  LauncherProcess node0(Concat(NodeFlags(port, "stop", 0), child));
  LauncherProcess node1(Concat(NodeFlags(port, "stop", 1), child));
  LauncherResult result0 = node0.Wait(), result1 = node1.Wait();
  EXPECT_EQ(result1.exit_code, 6) << result1.err;
  EXPECT_EQ(result0.exit_code, 6) << result0.err;
  EXPECT_THAT(result1.err, HasSubstr("first failure: rank 3"));
  EXPECT_THAT(result0.err, HasSubstr("node 1 failed: rank 3"));
  EXPECT_LT(result0.elapsed, seconds(15));
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
}

TEST(MultiNodeLauncher, MaxRestartsRestartsEveryNode) {
  TempDir dir;
  const int port = FreePort();
  std::vector<std::string> child =
      ChildCommand(dir, {"--fail_rank=2", "--fail_attempts=1", "--fail_after_ms=200",
                         "--sleep_ms=800", "--exit_code=5"});
  LauncherProcess node0(Concat(NodeFlags(port, "restart", 0), Concat({"--max_restarts=1"}, child)));
  LauncherProcess node1(Concat(NodeFlags(port, "restart", 1), Concat({"--max_restarts=1"}, child)));
  LauncherResult result0 = node0.Wait(), result1 = node1.Wait();
  EXPECT_EQ(result0.exit_code, 0) << result0.err;
  EXPECT_EQ(result1.exit_code, 0) << result1.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(RecordedEnvironment(dir.path(), rank, 1)["TORCHELASTIC_RESTART_COUNT"], "1") << rank;
  }
  EXPECT_TRUE(AllRecordedProcessesGone(dir.path()));
}

}  // namespace
}  // namespace infini::launch::testing
