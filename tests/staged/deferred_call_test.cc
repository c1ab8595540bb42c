// A staged collective returns once enqueued, as a device collective does
// (issue 33 item 1), where the device can wait for the host (the arena's
// host flags): with a peer 3 s late, the punctual rank's calls return at
// once and its stream waits; twenty calls in flight at once each get their
// own sum. Without host flags (ARENA_NO_HOST_FLAGS=1) each call returns
// after its host part, and the sums are the same.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "../examples/program_runner.h"

namespace {

using infini::examples::gpt2::testing::RunCommand;
using RunResult = infini::examples::gpt2::testing::Result;

constexpr int kLateMs = 3000;

struct Timing {
  long issued_ms = -1, done_ms = -1;
  bool right = false;
};

// Rank `rank`'s "deferred_call: rank R issued N calls in X ms, done after Y
// ms, sums right" line.
Timing TimingOf(const std::string& output, int rank) {
  const std::regex line("deferred_call: rank " + std::to_string(rank) +
                        " issued [0-9]+ calls in ([0-9]+) ms, done after ([0-9]+) ms, sums "
                        "(right|wrong)");
  std::smatch match;
  Timing timing;
  if (!std::regex_search(output, match, line)) return timing;
  timing.issued_ms = std::stol(match[1]);
  timing.done_ms = std::stol(match[2]);
  timing.right = match[3] == "right";
  return timing;
}

RunResult RunLate(const std::string& environment, int calls) {
  return RunCommand("env " + environment + " " + std::string(INFINI_RUN_PATH) +
                    " --nproc_per_node=2 --ccl_backend=gloo --device_backend=" + ARENA_PLUGIN_PATH +
                    " -- " + DEFERRED_CALL_PROGRAM_PATH + " --calls=" + std::to_string(calls) +
                    " --late_rank=1 --late_ms=" + std::to_string(kLateMs));
}

TEST(StagedCalls, ReturnOnceEnqueuedAndTheStreamWaitsForTheLatePeer) {
  const RunResult run = RunLate("ARENA_NO_HOST_FLAGS=0", 20);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Timing punctual = TimingOf(run.output, 0);
  ASSERT_GE(punctual.issued_ms, 0) << run.output;
  EXPECT_TRUE(punctual.right) << run.output;
  EXPECT_TRUE(TimingOf(run.output, 1).right) << run.output;
  // Twenty calls issued while the peer sleeps; the results came after it woke.
  EXPECT_LT(punctual.issued_ms, kLateMs / 2) << run.output;
  EXPECT_GE(punctual.done_ms, kLateMs * 2 / 3) << run.output;
}

TEST(StagedCalls, WithoutHostFlagsEachCallReturnsAfterItsHostPart) {
  const RunResult run = RunLate("ARENA_NO_HOST_FLAGS=1", 3);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Timing punctual = TimingOf(run.output, 0);
  EXPECT_TRUE(punctual.right) << run.output;
  EXPECT_TRUE(TimingOf(run.output, 1).right) << run.output;
  EXPECT_GE(punctual.issued_ms, kLateMs * 2 / 3) << run.output;
}

}  // namespace
