// The stuck rank's stacks, read by infini_run before it stops the run, and
// every rank's stacks on --dump_stacks (SIGUSR2) while the run goes on:
// real launchers, real ranks (stack_dump_child), real gdb.
#include "infini/launch/stack_dump.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "launcher_harness.h"

namespace infini::launch::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

const std::string kChild = STACK_DUMP_CHILD_PATH;

bool HaveGdb() {
  for (const char* path : {"/usr/bin/gdb", "/bin/gdb", "/usr/local/bin/gdb"}) {
    if (access(path, X_OK) == 0) return true;
  }
  return false;
}

#define REQUIRE_GDB() \
  if (!HaveGdb()) GTEST_SKIP() << "gdb is not installed (scripts/dev.sh installs it)"

size_t Count(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

TEST(StackDumpTest, StuckRanksStacksNameTheFunctionItHangsInAndGoToItsLogFolder) {
  REQUIRE_GDB();
  TempDir logs;
  const LauncherResult result =
      RunLauncher({"--nproc_per_node=2", "--rdzv_id=stacks-stuck", "--log_dir=" + logs.path(),
                   "--term_timeout=2", kChild, "--mode=stuck"});
  EXPECT_EQ(result.exit_code, 124) << result.err;
  EXPECT_LT(result.elapsed, 15s) << result.err;
  EXPECT_THAT(result.err,
              AllOf(HasSubstr("infini_run: stuck rank: rank 1 (local rank 1"),
                    HasSubstr("infini_run: stacks of rank 1 (local rank 1, pid "),
                    HasSubstr("before infini_run stopped it (whole stacks: " + logs.path() +
                              "/stacks-stuck/attempt_0/rank_1/stacks.log):"),
                    HasSubstr("HangInsideAllReduceForTest at "), HasSubstr("stack_dump_child.cc:"),
                    Not(HasSubstr("stacks of rank 0"))))
      << result.err;
  // The summary names the stuck rank first, then its stacks.
  EXPECT_LT(result.err.find("stuck rank: rank 1"), result.err.find("stacks of rank 1"));
  const std::string whole = ReadFile(logs.path() + "/stacks-stuck/attempt_0/rank_1/stacks.log");
  EXPECT_THAT(whole, AllOf(HasSubstr("==== stacks of the stuck rank 1, read before infini_run "
                                     "stopped it ===="),
                           HasSubstr("Thread 1 "), HasSubstr("HangInsideAllReduceForTest () at "),
                           HasSubstr("in main (argc=")))
      << whole;
  EXPECT_TRUE(NoProcessLeft());
}

TEST(StackDumpTest, WithoutALogFolderOrAPidNamespaceTheStacksAreInTheSummary) {
  REQUIRE_GDB();
  LaunchSetup setup;
  setup.extra_environment = {"INFINI_RUN_PID_NAMESPACE=0"};
  LauncherProcess launcher({"--nproc_per_node=2", "--term_timeout=2", kChild, "--mode=stuck"},
                           setup);
  const LauncherResult result = launcher.Wait(30s);
  EXPECT_EQ(result.exit_code, 124) << result.err;
  EXPECT_THAT(result.err,
              AllOf(HasSubstr("infini_run: stacks of rank 1 (local rank 1, pid "),
                    HasSubstr("before infini_run stopped it:"),
                    HasSubstr("HangInsideAllReduceForTest at "), Not(HasSubstr("whole stacks:"))))
      << result.err;
  EXPECT_TRUE(NoProcessLeft());
}

// The flight recorder's line reaches node 0's launcher; the stuck rank runs
// on node 1, whose launcher learns it with node 0's failure and reads it.
TEST(StackDumpTest, AStuckRankOnAnotherNodeIsReadByItsOwnNodesLauncher) {
  REQUIRE_GDB();
  const std::string endpoint = "--rdzv_endpoint=127.0.0.1:" + std::to_string(FreePort());
  auto node = [&](int node_rank) {
    return std::vector<std::string>{"--nnodes=2",
                                    "--nproc_per_node=1",
                                    endpoint,
                                    "--rdzv_id=stacks-nodes",
                                    "--rdzv_timeout=20",
                                    "--term_timeout=2",
                                    "--node_rank=" + std::to_string(node_rank),
                                    kChild,
                                    "--mode=stuck"};
  };
  LauncherProcess node0(node(0));
  LauncherProcess node1(node(1));
  const LauncherResult result0 = node0.Wait(30s), result1 = node1.Wait(30s);
  EXPECT_EQ(result0.exit_code, 124) << result0.err;
  EXPECT_EQ(result1.exit_code, 124) << result1.err;
  EXPECT_THAT(result0.err, AllOf(HasSubstr("infini_run: stuck rank: rank 1 (another node)"),
                                 Not(HasSubstr("stacks of rank"))))
      << result0.err;
  EXPECT_THAT(result1.err,
              AllOf(HasSubstr("infini_run: node 0 failed: rank 0 (pid "),
                    HasSubstr("exit code 124; flight recorder: stuck rank 1; stopped this node's "
                              "ranks, exiting with 124"),
                    HasSubstr("infini_run: stacks of rank 1 (local rank 0, pid "),
                    HasSubstr("HangInsideAllReduceForTest at ")))
      << result1.err;
  EXPECT_TRUE(NoProcessLeft());
}

TEST(StackDumpTest, AMissingDebuggerIsOneLineNamingIt) {
  for (const std::string tool : {"no-such-debugger", "/nonexistent/gdb"}) {
    LaunchSetup setup;
    setup.extra_environment = {"INFINI_RUN_STACK_TOOL=" + tool};
    LauncherProcess launcher({"--nproc_per_node=2", "--term_timeout=2", kChild, "--mode=stuck"},
                             setup);
    const LauncherResult result = launcher.Wait(30s);
    EXPECT_EQ(result.exit_code, 124) << result.err;
    const std::string why =
        tool.find('/') == std::string::npos ? "not found in PATH" : "is not an executable";
    EXPECT_THAT(result.err, HasSubstr(") not read: '" + tool + "' " + why +
                                      " (install gdb, or name one with INFINI_RUN_STACK_TOOL)\n"))
        << result.err;
    EXPECT_EQ(Count(result.err, "infini_run: stacks of rank"), 1u) << result.err;
  }
  EXPECT_TRUE(NoProcessLeft());
}

TEST(StackDumpTest, DumpStacksPrintsEveryRanksStacksAndTheRunGoesOn) {
  REQUIRE_GDB();
  TempDir logs;
  // The ranks go on until the stacks were read (or 20 s, a hang's bound).
  const std::string done = logs.path() + "/done";
  LauncherProcess launcher({"--nproc_per_node=2", "--rdzv_id=stacks-live",
                            "--log_dir=" + logs.path(), kChild, "--mode=live", "--seconds=20",
                            "--until=" + done});
  ASSERT_GT(FindRankPid(launcher.pid(), 0), 0);
  ASSERT_GT(FindRankPid(launcher.pid(), 1), 0);
  const LauncherResult asked = RunLauncher({"--dump_stacks=stacks-live"}, 10s);
  EXPECT_EQ(asked.exit_code, 0) << asked.err;
  EXPECT_THAT(asked.out, HasSubstr("infini_run: asked the launcher of run 'stacks-live' (pid " +
                                   std::to_string(launcher.pid()) + ") for every rank's stacks"))
      << asked.out << asked.err;
  auto stacks_of = [&](int rank) {
    return ReadFile(logs.path() + "/stacks-live/attempt_0/rank_" + std::to_string(rank) +
                    "/stacks.log");
  };
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while ((stacks_of(0).empty() || stacks_of(1).empty()) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  FILE* marker = std::fopen(done.c_str(), "w");
  ASSERT_NE(marker, nullptr);
  std::fclose(marker);
  const LauncherResult result = launcher.Wait(30s);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  for (int rank : {0, 1}) {
    const std::string name = "stacks of rank " + std::to_string(rank) + " (local rank " +
                             std::to_string(rank) + ", pid ";
    EXPECT_THAT(result.err, HasSubstr(name)) << result.err;
    EXPECT_THAT(stacks_of(rank), AllOf(HasSubstr("asked for by SIGUSR2"),
                                       HasSubstr("SpinInsideTrainingStepForTest (seconds=")))
        << stacks_of(rank);
  }
  EXPECT_EQ(Count(result.err, "SpinInsideTrainingStepForTest at "), 2u) << result.err;
  EXPECT_TRUE(NoProcessLeft());
}

TEST(StackDumpTest, DumpStacksOfNoRunIsOneLine) {
  const LauncherResult none = RunLauncher({"--dump_stacks=no-such-run"}, 10s);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.err, HasSubstr("infini_run: error: --dump_stacks=no-such-run: no ranks of run "
                                  "'no-such-run' on this machine (runs here: "))
      << none.err;
  EXPECT_EQ(Count(none.err, "\n"), 1u) << none.err;
  const LauncherResult bad = RunLauncher({"--dump_stacks=a/b"}, 10s);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--dump_stacks='a/b': expected a run id")) << bad.err;
  const LauncherResult with_program = RunLauncher({"--dump_stacks", kChild}, 10s);
  EXPECT_EQ(with_program.exit_code, 2);
  EXPECT_THAT(with_program.err, HasSubstr("expected no program")) << with_program.err;
}

// A debugger that never finishes (here one whose child keeps the pipe open)
// is killed with its process group at the bound.
TEST(StackDumpTest, ADebuggerThatHangsIsKilledAtTheBound) {
  TempDir dir;
  const std::string tool = dir.path() + "/stuck_debugger";
  const std::string child_pid = dir.path() + "/child.pid";
  FILE* script = std::fopen(tool.c_str(), "w");
  ASSERT_NE(script, nullptr);
  std::fprintf(script, "#!/bin/sh\nsleep 60 &\necho $! > %s\nwait\n", child_pid.c_str());
  std::fclose(script);
  chmod(tool.c_str(), 0755);
  StackCaptureOptions options;
  options.tool = tool;
  options.bound = 300ms;
  const auto start = std::chrono::steady_clock::now();
  const StackCapture capture = CaptureStacks(getpid(), options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_FALSE(capture.captured);
  EXPECT_EQ(capture.failure, tool + " did not finish within 300 ms; killed");
  const pid_t sleeper = static_cast<pid_t>(std::atoi(ReadFile(child_pid).c_str()));
  ASSERT_GT(sleeper, 0);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!ProcessGone(sleeper) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(ProcessGone(sleeper));
}

// Trimming, on gdb's own words: frame #0, frames with a source line, up to
// main; the others counted.
TEST(StackDumpTest, TrimKeepsTheWaitingFrameAndSourceFramesUpToMain) {
  const std::string backtraces =
      "Thread 2 (Thread 0x7f (LWP 11) \"worker\"):\n"
      "#0  __futex_abstimed_wait_common () from /lib/x86_64-linux-gnu/libc.so.6\n"
      "#1  pthread_cond_wait () from /lib/x86_64-linux-gnu/libc.so.6\n"
      "#2  (anonymous namespace)::Wait (a=..., f=(x)) at /src/wait.cc:12\n"
      "#3  std::thread::_M_run (this=0x1) at /usr/include/c++/12/bits/std_thread.h:252\n"
      "#4  start_thread (arg=<optimized out>) at ./nptl/pthread_create.c:442\n"
      "\n"
      "Thread 1 (Thread 0x7e (LWP 10) \"rank\"):\n"
      "#0  Step (n=...) at /src/step.cc:5\n"
      "#1  main (argc=..., argv=...) at /src/main.cc:9\n"
      "#2  __libc_start_call_main () at ../sysdeps/nptl/libc_start_call_main.h:58\n";
  EXPECT_EQ(TrimStacks(backtraces),
            "  Thread 2 (Thread 0x7f (LWP 11) \"worker\"):\n"
            "    #0  __futex_abstimed_wait_common from /lib/x86_64-linux-gnu/libc.so.6\n"
            "    #2  (anonymous namespace)::Wait at /src/wait.cc:12\n"
            "    (3 frames outside the program's sources or past the limit left out)\n"
            "  Thread 1 (Thread 0x7e (LWP 10) \"rank\"):\n"
            "    #0  Step at /src/step.cc:5\n"
            "    #1  main at /src/main.cc:9\n"
            "    (1 frame outside the program's sources or past the limit left out)\n");
  // Of many frames in our sources, the innermost and the outermost.
  std::string deep = "Thread 1 (Thread 0x7e (LWP 10) \"rank\"):\n";
  for (int frame = 0; frame < 12; ++frame) {
    deep += "#" + std::to_string(frame) + "  F" + std::to_string(frame) +
            " (x=1) at /src/f.cc:" + std::to_string(frame) + "\n";
  }
  EXPECT_EQ(TrimStacks(deep, 4),
            "  Thread 1 (Thread 0x7e (LWP 10) \"rank\"):\n"
            "    #0  F0 at /src/f.cc:0\n"
            "    #1  F1 at /src/f.cc:1\n"
            "    ...\n"
            "    #10  F10 at /src/f.cc:10\n"
            "    #11  F11 at /src/f.cc:11\n"
            "    (8 frames outside the program's sources or past the limit left out)\n");
}

}  // namespace
}  // namespace infini::launch::testing
