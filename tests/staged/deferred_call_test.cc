// A staged collective returns once enqueued, as a device collective does
// (issue 33 item 1), where the device writes and waits on host flags (the
// arena's) and no other rank uses the rank's device (each rank on its own
// arena device here, unless a test says otherwise): with a peer 3 s late, the punctual rank's calls
// return at once and its stream waits; twenty calls in flight at once each get their own sum,
// through the shared segment and through gloo, in one chunk and in many. A device-wide
// synchronization while they are in flight (a free, ARENA_FREE_SYNCS=1) waits for them and hangs
// nothing: the worker never needs the device runtime. With INFINI_CCL_STAGED_DEFER=0, without host
// flags (ARENA_NO_HOST_FLAGS=1), and by default for ranks sharing a device,
// each call returns after its host part, and the sums are the same; a bad
// value is one line.
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

RunResult RunLate(const std::string& environment, int calls, const std::string& flags = "") {
  return RunCommand("env ARENA_DEVICE_COUNT=2 " + environment + " " + std::string(INFINI_RUN_PATH) +
                    " --nproc_per_node=2 --ccl_backend=gloo --device_backend=" + ARENA_PLUGIN_PATH +
                    " -- " + DEFERRED_CALL_PROGRAM_PATH + " --calls=" + std::to_string(calls) +
                    " --late_rank=1 --late_ms=" + std::to_string(kLateMs) + " " + flags);
}

// Through the shared segment and through gloo; 4099 floats in one chunk and
// in five.
// (Islands never: the arena's own CCL would run its part when called.)
constexpr const char* kPaths[] = {
    "INFINI_CCL_STAGED_SHM=", "INFINI_CCL_STAGED_SHM=0 INFINI_CCL_STAGED_HIERARCHY_BYTES=never",
    "INFINI_CCL_STAGED_SHM= INFINI_CCL_STAGED_CHUNK_BYTES=4096",
    "INFINI_CCL_STAGED_SHM=0 INFINI_CCL_STAGED_HIERARCHY_BYTES=never "
    "INFINI_CCL_STAGED_CHUNK_BYTES=4096"};

void ExpectReturnedAtOnce(const RunResult& run, const std::string& environment) {
  ASSERT_EQ(run.exit_code, 0) << environment << "\n" << run.output;
  const Timing punctual = TimingOf(run.output, 0);
  ASSERT_GE(punctual.issued_ms, 0) << environment << "\n" << run.output;
  EXPECT_TRUE(punctual.right) << environment << "\n" << run.output;
  EXPECT_TRUE(TimingOf(run.output, 1).right) << environment << "\n" << run.output;
  // Twenty calls issued while the peer sleeps; the results came after it woke.
  EXPECT_LT(punctual.issued_ms, kLateMs / 2) << environment << "\n" << run.output;
  EXPECT_GE(punctual.done_ms, kLateMs * 2 / 3) << environment << "\n" << run.output;
}

TEST(StagedCalls, ReturnOnceEnqueuedAndTheStreamWaitsForTheLatePeer) {
  for (const char* path : kPaths) ExpectReturnedAtOnce(RunLate(path, 20), path);
}

TEST(StagedCalls, ADeviceWideSynchronizationWhileCallsAreInFlightHangsNothing) {
  for (const char* path : {kPaths[2], kPaths[3]}) {
    const std::string environment = std::string(path) + " ARENA_FREE_SYNCS=1";
    ExpectReturnedAtOnce(RunLate(environment, 20, "--free_after_issue=1"), environment);
  }
}

TEST(StagedCalls, WithDeferOffOrWithoutHostFlagsEachCallReturnsAfterItsHostPart) {
  for (const char* environment : {"INFINI_CCL_STAGED_DEFER=0", "ARENA_NO_HOST_FLAGS=1"}) {
    const RunResult run = RunLate(environment, 3);
    ASSERT_EQ(run.exit_code, 0) << environment << "\n" << run.output;
    const Timing punctual = TimingOf(run.output, 0);
    EXPECT_TRUE(punctual.right) << run.output;
    EXPECT_TRUE(TimingOf(run.output, 1).right) << run.output;
    EXPECT_GE(punctual.issued_ms, kLateMs * 2 / 3) << environment << "\n" << run.output;
  }
}

TEST(StagedCalls, RanksSharingADeviceStayInlineUnlessDeferIsOne) {
  const RunResult shared = RunLate("ARENA_DEVICE_COUNT=1", 3);
  ASSERT_EQ(shared.exit_code, 0) << shared.output;
  EXPECT_TRUE(TimingOf(shared.output, 0).right) << shared.output;
  EXPECT_GE(TimingOf(shared.output, 0).issued_ms, kLateMs * 2 / 3) << shared.output;
  ExpectReturnedAtOnce(RunLate("ARENA_DEVICE_COUNT=1 INFINI_CCL_STAGED_DEFER=1", 20),
                       "ARENA_DEVICE_COUNT=1 INFINI_CCL_STAGED_DEFER=1");
}

TEST(StagedCalls, ABadDeferSettingIsOneLine) {
  const RunResult run =
      RunCommand(std::string("env INFINI_CCL_STAGED_DEFER=yes ") + INFINI_RUN_PATH +
                 " --nproc_per_node=2 --ccl_backend=gloo --device_backend=" + ARENA_PLUGIN_PATH +
                 " -- " + DEFERRED_CALL_PROGRAM_PATH);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("INFINI_CCL_STAGED_DEFER='yes': expected 1"), std::string::npos)
      << run.output;
}

}  // namespace
