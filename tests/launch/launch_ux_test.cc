// What a torchrun user sees of infini_run (issues 34 and 35): processes it
// did not start are left alone, torchrun's spellings and PET_ variables,
// where the logs went, which pid failed. Real launchers, real ranks.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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

// bash execs infini_run, so the reader of `> >(...)` is infini_run's child:
// a process it did not start. It must read every line, across a restart,
// and end by itself once infini_run's stdout closes.
TEST(LaunchUx, AProcessSubstitutionReaderIsNeverKilledAndLosesNoLineAcrossARestart) {
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
  const ShellResult result = RunShell(script, {}, dir);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  ASSERT_TRUE(WaitForFileText(log, "READER-END", std::chrono::seconds(20)))
      << "the reader never finished (killed by infini_run?); it read:\n"
      << ReadFile(log).substr(0, 2000);
  const std::string read = ReadFile(log);
  EXPECT_EQ(CountLinesStartingWith(read, "[rank0]:aaaa"), 400u);
  EXPECT_EQ(CountLinesStartingWith(read, "[rank1]:bbbb"), 400u);
  EXPECT_THAT(result.output, HasSubstr("restarting every rank (restart 1 of 1)"));
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

}  // namespace
}  // namespace infini::launch::testing
