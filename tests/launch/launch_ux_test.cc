// What a torchrun user sees of infini_run (issues 34 and 35): processes it
// did not start are left alone, torchrun's spellings and PET_ variables,
// where the logs went, which pid failed, a lost node named as the cause.
// Real launchers, real ranks.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher_harness.h"

extern char** environ;

namespace infini::launch::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

struct ShellResult {
  int exit_code = -1;  // -1: still running after the bound (killed)
  std::string output;  // stdout and stderr
};

// Runs `script` with bash (stdout and stderr to one file), the test's mark
// and token in its environment, as a user's terminal would.
ShellResult RunShell(const std::string& script, const std::vector<std::string>& environment_extra,
                     const TempDir& dir,
                     std::chrono::milliseconds bound = std::chrono::seconds(30)) {
  const std::string output_path = dir.path() + "/shell_output";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> words = {"/bin/bash", "-c", script};
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::vector<std::string> environment;
  for (char** entry = environ; *entry; ++entry) environment.emplace_back(*entry);
  environment.push_back("INFINI_LAUNCH_TEST_MARK=" + TestMark());
  environment.push_back("INFINI_RUN_TOKEN=" + TestToken());
  environment.insert(environment.end(), environment_extra.begin(), environment_extra.end());
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  ShellResult result;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data()) != 0) return result;
  posix_spawn_file_actions_destroy(&actions);
  const auto deadline = Clock::now() + bound;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      result.output = ReadFile(output_path);
      return result;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.output = ReadFile(output_path);
  return result;
}

// Waits until `path` holds `text`, up to `bound`.
bool WaitForFileText(const std::string& path, const std::string& text,
                     std::chrono::milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  while (ReadFile(path).find(text) == std::string::npos) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

size_t CountLinesStartingWith(const std::string& text, const std::string& prefix) {
  size_t count = 0;
  for (const std::string& line : Lines(text)) count += line.rfind(prefix, 0) == 0;
  return count;
}

// The first line infini_run writes about a failure or a loss.
std::string FirstFailureLine(const std::string& err) {
  for (const std::string& line : Lines(err)) {
    if (line.rfind("infini_run:", 0) == 0 &&
        (line.find("fail") != std::string::npos || line.find("lost") != std::string::npos)) {
      return line;
    }
  }
  return "";
}

// bash execs infini_run, so the reader of `> >(...)` is infini_run's child:
// a process it did not start. It must read every line, across a restart,
// and end by itself once infini_run's stdout closes.
void ExpectTheReaderReadsEveryLine(const std::vector<std::string>& environment) {
  TempDir dir;
  const std::string log = dir.path() + "/tee.log";
  // Rank 0 fails in attempt 0 after every rank printed its lines; attempt 1
  // succeeds. 2 ranks x 2 attempts x 200 lines.
  const std::string script = "exec " + LauncherPath() +
                             " --nproc_per_node=2 --max_restarts=1 --term_timeout=5 -- " +
                             ChildPath() +
                             " --lines=200 --fail_rank=0 --fail_attempts=1 --fail_after_ms=500"
                             " > >(cat > " +
                             log + "; echo READER-END >> " + log + ")";
  const ShellResult result = RunShell(script, environment, dir);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  ASSERT_TRUE(WaitForFileText(log, "READER-END", std::chrono::seconds(20)))
      << "the reader never finished (killed by infini_run?); it read:\n"
      << ReadFile(log).substr(0, 2000);
  const std::string read = ReadFile(log);
  EXPECT_EQ(CountLinesStartingWith(read, "[rank0]:aaaa"), 400u);
  EXPECT_EQ(CountLinesStartingWith(read, "[rank1]:bbbb"), 400u);
  EXPECT_THAT(result.output, HasSubstr("restarting every rank (restart 1 of 1)"));
}

TEST(LaunchUx, AProcessSubstitutionReaderIsNeverKilledAndLosesNoLineAcrossARestart) {
  ExpectTheReaderReadsEveryLine({});
}

// Without a PID namespace (any unprivileged user) the ranks' watcher forks
// them; the reader is still infini_run's own child.
TEST(LaunchUx, AProcessSubstitutionReaderIsNeverKilledWithoutAPidNamespace) {
  ExpectTheReaderReadsEveryLine({"INFINI_RUN_PID_NAMESPACE=0"});
}

// Kubeflow's PyTorchJob (and TrainJob's torch runtime) hands torchrun its
// arguments as PET_ variables beside the pod's MASTER_ADDR, WORLD_SIZE and
// RANK; `infini_run PROGRAM` with no flag must run the job from them.
TEST(LaunchUx, TwoNodesRunFromOnlyThePetVariablesKubeflowSets) {
  TempDir dir;
  const std::string port = std::to_string(FreePort());
  auto pod = [&](int index) {
    LaunchSetup setup;
    setup.with_token = false;  // Kubeflow hands none
    setup.extra_environment = {"PET_NNODES=2",
                               "PET_NPROC_PER_NODE=2",
                               "PET_NODE_RANK=" + std::to_string(index),
                               "PET_MASTER_ADDR=127.0.0.1",
                               "PET_MASTER_PORT=" + port,
                               "MASTER_ADDR=127.0.0.1",
                               "MASTER_PORT=" + port,
                               "WORLD_SIZE=2",
                               "RANK=" + std::to_string(index),
                               "PYTHONUNBUFFERED=1"};
    return setup;
  };
  LauncherProcess node0({ChildPath(), "--dir=" + dir.path()}, pod(0));
  LauncherProcess node1({ChildPath(), "--dir=" + dir.path()}, pod(1));
  const LauncherResult result0 = node0.Wait();
  const LauncherResult result1 = node1.Wait();
  ASSERT_EQ(result0.exit_code, 0) << result0.err;
  ASSERT_EQ(result1.exit_code, 0) << result1.err;
  for (int rank = 0; rank < 4; ++rank) {
    const auto environment = RecordedEnvironment(dir.path(), rank);
    EXPECT_EQ(environment.at("WORLD_SIZE"), "4") << rank;
    EXPECT_EQ(environment.at("RANK"), std::to_string(rank));
    EXPECT_EQ(environment.at("GROUP_RANK"), std::to_string(rank / 2));
    EXPECT_EQ(environment.at("TORCHELASTIC_RUN_ID"), "static-127.0.0.1-" + port);
  }
}

// --tee without --log_dir writes to a private default folder: one line says
// which, before the ranks start.
TEST(LaunchUx, TeeSaysOnceWhereTheLogFilesWent) {
  // A run id of its own: the default folder is the user's, outside the test's.
  const std::string run_id = "uxtee-" + std::to_string(getpid()) + "-" +
                             std::to_string(Clock::now().time_since_epoch().count());
  const LauncherResult result = RunLauncher(
      {"--nproc_per_node=2", "-t3", "--rdzv_id=" + run_id, "--", ChildPath(), "--print=hello"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string said = "infini_run: each rank's output is written to ";
  ASSERT_EQ(CountLinesStartingWith(result.err, said), 1u) << result.err;
  const size_t start = result.err.find(said) + said.size();
  const std::string run_path = result.err.substr(
      start, result.err.find("/attempt_K/rank_N/{stdout,stderr}.log", start) - start);
  EXPECT_THAT(run_path, ::testing::EndsWith("/infini_run/logs/" + run_id)) << result.err;
  EXPECT_EQ(ReadFile(run_path + "/attempt_0/rank_1/stdout.log"), "hello\n");
  EXPECT_THAT(result.out, HasSubstr("[rank1]:hello"));
  std::filesystem::remove_all(run_path);
}

// A rank prints its getpid(); in infini_run's PID namespace that is not the
// launcher's pid of it. The failure summary names the one the rank saw.
TEST(LaunchUx, TheFailureSummaryNamesThePidTheRankSaw) {
  TempDir dir;
  const LauncherResult result =
      RunLauncher({"--nproc_per_node=2", "--term_timeout=5", "--", ChildPath(),
                   "--dir=" + dir.path(), "--fail_rank=1", "--long_from=0", "--sleep_ms=5000"});
  ASSERT_EQ(result.exit_code, 1) << result.err;
  const std::string seen = Lines(ReadFile(dir.path() + "/1.0.pid")).at(0);
  std::string failure_line;
  for (const std::string& line : Lines(result.err)) {
    if (line.rfind("infini_run: first failure: rank 1 ", 0) == 0) failure_line = line;
  }
  const bool named =
      failure_line.find("getpid() " + seen + " in its PID namespace") != std::string::npos ||
      failure_line.find("pid " + seen + "):") != std::string::npos;
  EXPECT_TRUE(named) << "rank 1 saw pid " << seen << "; the summary says: " << failure_line;
}

// Node 0 waiting for a node that never comes says whom it waits for, after
// 5 s and every 30 s, instead of silence until --rdzv_timeout.
TEST(LaunchUx, NodeZeroSaysWhichNodesItWaitsFor) {
  const LauncherResult result = RunLauncher(
      {"--nnodes=2", "--node_rank=0", "--rdzv_endpoint=127.0.0.1:" + std::to_string(FreePort()),
       "--rdzv_id=ux-wait", "--rdzv_timeout=6", "--", ChildPath()});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_EQ(CountLinesStartingWith(result.err,
                                   "infini_run: waiting for every node to start attempt 0 for 5 "
                                   "s: missing node(s) 1; gives up in "),
            1u)
      << result.err;
}

// ...and again every period (30 s; 1 s here through INFINI_RUN_WAITING_NOTE_S).
TEST(LaunchUx, NodeZeroSaysWhichNodesItWaitsForEveryPeriod) {
  LaunchSetup setup;
  setup.extra_environment = {"INFINI_RUN_WAITING_NOTE_S=1"};
  LauncherProcess launcher(
      {"--nnodes=2", "--node_rank=0", "--rdzv_endpoint=127.0.0.1:" + std::to_string(FreePort()),
       "--rdzv_id=ux-wait-period", "--rdzv_timeout=4", "--", ChildPath()},
      setup);
  const LauncherResult result = launcher.Wait();
  EXPECT_EQ(result.exit_code, 1) << result.err;
  const std::string line = "infini_run: waiting for every node to start attempt 0 for ";
  for (const std::string waited : {"1", "2"}) {
    EXPECT_EQ(
        CountLinesStartingWith(result.err, line + waited + " s: missing node(s) 1; gives up in "),
        1u)
        << result.err;
  }
  EXPECT_GE(CountLinesStartingWith(result.err, line), 3u) << result.err;
}

// A joining node whose node 0 is not there says so every period too.
TEST(LaunchUx, AJoiningNodeSaysWhatItWaitsForEveryPeriod) {
  LaunchSetup setup;
  setup.extra_environment = {"INFINI_RUN_WAITING_NOTE_S=1"};
  const int port = FreePort();
  LauncherProcess launcher(
      {"--nnodes=2", "--node_rank=1", "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
       "--rdzv_id=ux-join-period", "--rdzv_timeout=4", "--", ChildPath()},
      setup);
  const LauncherResult result = launcher.Wait();
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_GE(CountLinesStartingWith(
                result.err, "infini_run: waiting for node 0's rendezvous store at 127.0.0.1:" +
                                std::to_string(port) + " (--rdzv_endpoint) since "),
            3u)
      << result.err;
}

// The period's variable is checked like a flag: one line, exit 2.
TEST(LaunchUx, ABadWaitingNotePeriodIsOneLine) {
  LaunchSetup setup;
  setup.extra_environment = {"INFINI_RUN_WAITING_NOTE_S=soon"};
  LauncherProcess launcher({"--", ChildPath()}, setup);
  const LauncherResult result = launcher.Wait();
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_EQ(result.err,
            "infini_run: error: INFINI_RUN_WAITING_NOTE_S='soon': expected seconds between notes "
            "of a waiting launcher, above 0 and below 10^7\n");
}

#ifdef KVTEST_PLUGIN_PATH
// A device backend with no device here: one line from the launcher, before
// any rank starts, instead of the same failure in every rank.
TEST(LaunchUx, ADeviceBackendWithoutADeviceFailsOnceInTheLauncher) {
  TempDir dir;
  LaunchSetup setup;
  setup.extra_environment = {"KVTEST_VISIBLE_DEVICES="};
  LauncherProcess launcher({"--nproc_per_node=2", "--ccl_backend=" KVTEST_PLUGIN_PATH, "--",
                            ChildPath(), "--dir=" + dir.path()},
                           setup);
  const LauncherResult result = launcher.Wait();
  EXPECT_EQ(result.exit_code, 2) << result.err;
  ASSERT_EQ(Lines(result.err).size(), 1u) << result.err;
  EXPECT_THAT(result.err,
              HasSubstr("infini_run: error: --ccl_backend=" KVTEST_PLUGIN_PATH
                        ": the backend sees no device on this machine (ccl_info --device_count: "
                        "0; KVTEST_VISIBLE_DEVICES=''): expected at least one"));
  EXPECT_TRUE(RecordedPids(dir.path()).empty()) << "a rank was started";
}
#endif

// torch.distributed.launch's form names where the launchers meet with
// --master_addr/--master_port; a failure to get there names those flags.
TEST(LaunchUx, AnUnreachableMasterAddrIsNamedAsGiven) {
  const LauncherResult result = RunLauncher(
      {"--nnodes=2", "--node_rank=1", "--master_addr=127.0.0.1",
       "--master_port=" + std::to_string(FreePort()), "--rdzv_timeout=1", "--", ChildPath()});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("(--master_addr/--master_port, --rdzv_timeout)"));
  EXPECT_THAT(result.err, Not(HasSubstr("--rdzv_endpoint")));
}

#ifdef PARALLEL_CHECK_PATH
// Ranks in infini_run's PID namespace have the same pids in every run, and
// glog names a file after the second and the pid: two runs started together
// with one INFINI_CCL_LOG_DIR lost one run's files ("COULD NOT CREATE
// LOGFILE"), and both exited 0. Each file now carries its run's id.
TEST(LaunchUx, TwoRunsAtOnceWithOneInfiniCclLogDirKeepEveryFile) {
  TempDir dir;
  LaunchSetup setup;
  setup.extra_environment = {"INFINI_CCL_LOG_DIR=" + dir.path(), "INFINI_CCL_DEBUG=INFO"};
  auto run = [&](const std::string& run_id) {
    return std::make_unique<LauncherProcess>(
        std::vector<std::string>{"--nproc_per_node=2", "--ccl_backend=gloo", "--rdzv_id=" + run_id,
                                 "--", PARALLEL_CHECK_PATH, "--threads_per_process=2"},
        setup);
  };
  auto first = run("uxlogs-a");
  auto second = run("uxlogs-b");
  const LauncherResult first_result = first->Wait(std::chrono::seconds(60));
  const LauncherResult second_result = second->Wait(std::chrono::seconds(60));
  ASSERT_EQ(first_result.exit_code, 0) << first_result.err;
  ASSERT_EQ(second_result.exit_code, 0) << second_result.err;
  EXPECT_THAT(first_result.err + second_result.err, Not(HasSubstr("COULD NOT CREATE")));
  for (const std::string run_id : {"uxlogs-a", "uxlogs-b"}) {
    for (int process = 0; process < 2; ++process) {
      const std::string prefix =
          "proc" + std::to_string(process) + ".INFO." + run_id + ".attempt0.";
      size_t files = 0;
      for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
        const std::string name = entry.path().filename().string();
        if (name.rfind(prefix, 0) != 0 || !entry.is_regular_file()) continue;
        ++files;
        EXPECT_THAT(ReadFile(entry.path()), HasSubstr("[rank " + std::to_string(2 * process)));
      }
      EXPECT_EQ(files, 1u) << prefix;
    }
  }
}

// A rank that skips a collective leaves the others waiting for the whole
// INFINI_CCL_TIMEOUT_S (10 minutes by default): each waiting process says
// so once, at half the timeout or 30 s, before the watchdog ends the run.
TEST(LaunchUx, ARankStuckInACollectiveIsSaidEarlyAndOnce) {
  LaunchSetup setup;
  setup.extra_environment = {"INFINI_CCL_TIMEOUT_S=2"};
  LauncherProcess launcher({"--nproc_per_node=2", "--ccl_backend=gloo", "--term_timeout=5", "--",
                            PARALLEL_CHECK_PATH, "--mode=hang", "--faulty_rank=1"},
                           setup);
  const LauncherResult result = launcher.Wait(std::chrono::seconds(60));
  EXPECT_EQ(result.exit_code, 124) << result.err;
  const std::string output = result.out + result.err;
  const std::string notice =
      "still waits for the other ranks after 1 s; the run ends at "
      "INFINI_CCL_TIMEOUT_S=2 s unless it completes";
  size_t notices = 0;
  for (const std::string& line : Lines(output)) {
    notices += line.rfind("[rank", 0) == 0 && line.find(notice) != std::string::npos;
  }
  EXPECT_EQ(notices, 1u) << "rank 0 waits; rank 1 skipped the collective\n" << output;
  const size_t said = output.find(notice);
  const size_t fired = output.find("did not complete within INFINI_CCL_TIMEOUT_S=2");
  ASSERT_NE(fired, std::string::npos) << output;
  EXPECT_LT(said, fired) << output;
}

// --ccl_backend=auto on a machine with no GPU runs on gloo: one line says so
// and why (which accelerator plugin was passed over), from the first process
// only, not once per rank.
TEST(LaunchUx, AutoSaysOnceThatItFellBackToGloo) {
  LaunchSetup setup;
  setup.extra_environment = {"CUDA_VISIBLE_DEVICES="};  // GPU-less, also on a GPU host
  LauncherProcess launcher({"--nproc_per_node=2", "--ccl_backend=auto", "--", PARALLEL_CHECK_PATH,
                            "--tensor_parallel=1", "--pipeline_parallel=1"},
                           setup);
  const LauncherResult result = launcher.Wait(std::chrono::seconds(60));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string output = result.out + result.err;
  std::vector<std::string> said;
  for (const std::string& line : Lines(output)) {
    if (line.find("--ccl_backend=auto: using gloo (CPU): ") != std::string::npos) {
      said.push_back(line);
    }
  }
  ASSERT_EQ(said.size(), 1u) << output;
  // Why: the nccl plugin sees no device, or there is none installed.
  EXPECT_TRUE(said[0].find("nccl: ") != std::string::npos ||
              said[0].find("no accelerator plugin is installed") != std::string::npos)
      << said[0];
}
#endif

// A fixed run (--nnodes=3, with and without restarts) whose node 2 is
// SIGKILLed while its rank is in a collective with the others: the others'
// ranks see the peer's connection close about when node 0 sees its
// launcher's, and every survivor names the node's loss as the cause, never a
// rank's collective error first (issue 34).
TEST(LaunchUx, ANodeLostInACollectiveIsNamedAsTheCauseNeverARanksError) {
  for (const std::string restarts : {"0", "1"}) {
    TempDir dir;
    const std::string port = std::to_string(FreePort());
    const auto node = [&](int node_rank) {
      return std::vector<std::string>{"--nnodes=3",
                                      "--node_rank=" + std::to_string(node_rank),
                                      "--nproc_per_node=1",
                                      "--rdzv_endpoint=127.0.0.1:" + port,
                                      "--rdzv_id=ux-lost-in-collective-" + restarts,
                                      "--max_restarts=" + restarts,
                                      "--",
                                      PEER_LINK_CHILD_PATH,
                                      "--dir=" + dir.path()};
    };
    LauncherProcess node0(node(0));
    LauncherProcess node1(node(1));
    LauncherProcess node2(node(2));
    for (int rank = 0; rank < 3; ++rank) {
      ASSERT_TRUE(WaitForFileText(dir.path() + "/" + std::to_string(rank) + ".linked", "1",
                                  std::chrono::seconds(30)))
          << rank;
    }
    ASSERT_EQ(kill(node2.pid(), SIGKILL), 0);
    const LauncherResult survivors[] = {node0.Wait(), node1.Wait()};
    node2.Wait(std::chrono::seconds(5));
    for (const LauncherResult& survivor : survivors) {
      EXPECT_EQ(survivor.exit_code, 1) << survivor.err;
      EXPECT_THAT(FirstFailureLine(survivor.err), HasSubstr("node 2 lost: its infini_run ("))
          << "--max_restarts=" << restarts << "\n"
          << survivor.err;
      EXPECT_THAT(survivor.err, Not(HasSubstr("failure summary"))) << survivor.err;
      EXPECT_THAT(survivor.err, Not(HasSubstr("restarting"))) << survivor.err;
    }
  }
  EXPECT_TRUE(NoProcessLeft());
}

}  // namespace
}  // namespace infini::launch::testing
