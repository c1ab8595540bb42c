// In-place recovery in real processes: bin/shrink_check under infini_run
// --on_failure=shrink on gloo (docs/parallel.md, "In-place recovery"). Each
// case checks the run's exit code, the world every survivor ends in, that
// the loss was named, and (through shrink_check's own checks) that every
// collective after the recovery sums over exactly the survivors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "registration_log.h"
#include "trace_json.h"
#include "unused_port.h"

namespace {

using infini::testing::DescribeFaultEvents;
using infini::testing::FaultEventsOf;
using infini::testing::Json;
using infini::testing::ReadJsonFile;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kBinDir = INFINI_PARALLEL_BIN_DIR;

// ctest runs each test in a process of its own: its pid, passed to every
// shrink_check it starts (--run_tag), tells them from those of tests running
// beside it.
const std::string kRunTag = std::to_string(getpid());
const std::string kShrinkCheck = kBinDir + "/shrink_check --run_tag=" + kRunTag;

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs the command line (a bounded shell pipeline; `timeout` kills a hang).
Outcome RunShell(const std::string& command) {
  Outcome outcome;
  FILE* pipe = popen(("timeout -s KILL 60 " + command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return outcome;
  std::array<char, 4096> buffer;
  size_t got;
  while ((got = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    outcome.output.append(buffer.data(), got);
  const int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return outcome;
}

Outcome RunShrinkCheck(int ranks, const std::string& arguments,
                       const std::string& launcher_flags = "") {
  return RunShell(kBinDir + "/infini_run --nproc_per_node=" + std::to_string(ranks) +
                  " --on_failure=shrink --ccl_backend=gloo --term_timeout=2 " + launcher_flags +
                  " -- " + kShrinkCheck + " " + arguments);
}

bool HaveLauncher() { return access((kBinDir + "/infini_run").c_str(), X_OK) == 0; }
#define REQUIRE_LAUNCHER() \
  if (!HaveLauncher()) GTEST_SKIP() << "bin/infini_run is not built";

// A scratch folder for a run's --trace_dir, removed at the end.
class TraceFolder {
 public:
  TraceFolder() {
    char pattern[] = "/tmp/shrink_trace_XXXXXX";
    path_ = mkdtemp(pattern) != nullptr ? pattern : "/tmp";
  }
  ~TraceFolder() { RunShell("rm -rf '" + path_ + "'"); }
  const std::string& path() const { return path_; }
  std::string Flag() const { return "--trace_dir=" + path_; }

 private:
  std::string path_;
};

// The one event `name` of lane `lane` in trace.json, or a failure.
const Json* OneFaultEvent(const Json& trace, const std::string& name, int lane) {
  const auto events = FaultEventsOf(trace, name);
  const auto found = events.find(lane);
  EXPECT_TRUE(found != events.end() && found->second.size() == 1)
      << "expected one '" << name << "' event on lane " << lane << "; the trace has:\n"
      << DescribeFaultEvents(trace);
  return found != events.end() && found->second.size() == 1 ? found->second[0] : nullptr;
}

std::vector<double> Numbers(const Json& array) {
  std::vector<double> numbers;
  for (const Json& item : array.items) numbers.push_back(item.number);
  return numbers;
}

// No shrink_check of this test is left running.
bool NoCheckLeft() {
  for (int tries = 0; tries < 50; ++tries) {
    if (RunShell("pgrep -u $(id -u) -f 'shrink_check --run_tag=" + kRunTag + "( |$)'")
            .output.empty())
      return true;
    usleep(100 * 1000);
  }
  return false;
}

// Traced (docs/tracing.md, "Watchdog and recovery events"): each survivor's
// lane, its launch rank's, holds the loss it heard, its groups revoked and
// shrunk, and the shrink with the lost rank and the new world.
TEST(ShrinkRecoveryTest, SurvivorsOfAKilledRankRenumberAndGoOn) {
  REQUIRE_LAUNCHER();
  const TraceFolder trace_dir;
  const Outcome outcome =
      RunShrinkCheck(3, "--steps=6 --kill_rank=1 --kill_at_step=3", trace_dir.Flag());
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("rank 1 (pid"));
  EXPECT_THAT(outcome.output, HasSubstr("lost rank 1 (local rank 1"));
  EXPECT_THAT(
      outcome.output,
      HasSubstr(
          "rank 0: recovered at step 3: lost 1; world now 2 ranks, rank 0, dp=2, generation 1"));
  EXPECT_THAT(
      outcome.output,
      HasSubstr(
          "rank 2: recovered at step 3: lost 1; world now 2 ranks, rank 1, dp=2, generation 1"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 0: done world=2 rank=0 steps=6 recoveries=1"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 2: done world=2 rank=1 steps=6 recoveries=1"));
  EXPECT_THAT(outcome.output, Not(HasSubstr("WRONG")));
  EXPECT_TRUE(NoCheckLeft());

  const Json trace = ReadJsonFile(trace_dir.path() + "/trace.json");
  for (const int lane : {0, 2}) {
    const int new_rank = lane == 0 ? 0 : 1;
    if (const Json* shrink = OneFaultEvent(trace, "shrink", lane)) {
      EXPECT_EQ((*shrink)["ph"].text, "X");
      EXPECT_EQ((*shrink)["cat"].text, "recovery");
      EXPECT_GE((*shrink)["dur"].number, 0);
      const Json& args = (*shrink)["args"];
      EXPECT_EQ(Numbers(args["lost_ranks"]), std::vector<double>{1});
      EXPECT_EQ(Numbers(args["newly_lost_ranks"]), std::vector<double>{1});
      EXPECT_EQ(args["old_world_size"].number, 3);
      EXPECT_EQ(args["new_world_size"].number, 2);
      EXPECT_EQ(args["old_rank"].number, lane);
      EXPECT_EQ(args["new_rank"].number, new_rank);
      EXPECT_EQ(args["generation"].number, 1);
    }
    if (const Json* notice = OneFaultEvent(trace, "loss_notice", lane)) {
      EXPECT_EQ((*notice)["ph"].text, "i");
      EXPECT_EQ(Numbers((*notice)["args"]["lost_ranks"]), std::vector<double>{1});
    }
    const auto revokes = FaultEventsOf(trace, "revoke");
    ASSERT_TRUE(revokes.count(lane)) << DescribeFaultEvents(trace);
    EXPECT_EQ((*revokes.at(lane)[0])["args"]["how"].text, "comm_revoke");
    const auto shrunk = FaultEventsOf(trace, "shrink_group");
    ASSERT_TRUE(shrunk.count(lane)) << DescribeFaultEvents(trace);
    const Json& group = (*shrunk.at(lane)[0])["args"];
    EXPECT_EQ(group["old_size"].number, 3);
    EXPECT_EQ(group["new_size"].number, 2);
    EXPECT_EQ(Numbers(group["excluded_group_ranks"]), std::vector<double>{1});
    EXPECT_EQ(group["group_rank"].number, new_rank);
  }
  // The lost rank heard of no loss: it was the one lost.
  EXPECT_FALSE(FaultEventsOf(trace, "shrink").count(1)) << DescribeFaultEvents(trace);
  // Renumbered 1, launch rank 2 goes on in its own lane, not the lost rank's.
  const Json* shrink = OneFaultEvent(trace, "shrink", 2);
  ASSERT_NE(shrink, nullptr);
  const double shrunk_at = (*shrink)["ts"].number + (*shrink)["dur"].number;
  const auto calls = infini::testing::SpansOf(trace, "ccl");
  ASSERT_TRUE(calls.count(2));
  size_t later_in_lane_2 = 0;
  for (const infini::testing::TraceSpan& call : calls.at(2)) {
    later_in_lane_2 += call.begin_us >= shrunk_at ? 1 : 0;
  }
  EXPECT_GT(later_in_lane_2, 0u);
  if (calls.count(1)) {
    for (const infini::testing::TraceSpan& call : calls.at(1)) EXPECT_LT(call.begin_us, shrunk_at);
  }
}

TEST(ShrinkRecoveryTest, RanksBlockedInsideAnAllReduceWithTheLostRankGetOut) {
  REQUIRE_LAUNCHER();
  const Outcome outcome =
      RunShrinkCheck(3, "--steps=5 --kill_rank=2 --kill_at_step=2 --kill_inside");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("rank 0: done world=2 rank=0 steps=5 recoveries=1"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 1: done world=2 rank=1 steps=5 recoveries=1"));
  EXPECT_THAT(outcome.output, Not(HasSubstr("watchdog")));
  EXPECT_TRUE(NoCheckLeft());
}

TEST(ShrinkRecoveryTest, TwoLossesOneAfterAnother) {
  REQUIRE_LAUNCHER();
  const Outcome outcome = RunShrinkCheck(
      4, "--steps=6 --kill_rank=1 --kill_at_step=2 --second_kill_rank=3 --second_kill_at_step=4");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output,
              HasSubstr("rank 2: recovered at step 2: lost 1; world now 3 ranks, rank 1"));
  EXPECT_THAT(
      outcome.output,
      HasSubstr(
          "rank 2: recovered at step 4: lost 3; world now 2 ranks, rank 1, dp=2, generation 2"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 0: done world=2 rank=0 steps=6 recoveries=2"));
  EXPECT_THAT(outcome.output, HasSubstr("2 ranks lost"));
  EXPECT_TRUE(NoCheckLeft());
}

// Two ranks die at once (the second while the survivors agree on the
// first): the survivors agree on both and shrink once or twice, never apart.
TEST(ShrinkRecoveryTest, ASecondLossDuringTheRecoveryIsIncluded) {
  REQUIRE_LAUNCHER();
  const Outcome outcome =
      RunShrinkCheck(4,
                     "--steps=5 --kill_rank=1 --kill_at_step=2 --second_kill_rank=2 "
                     "--second_kill_at_step=2 --kill_inside");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("rank 0: done world=2 rank=0 steps=5"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 3: done world=2 rank=1 steps=5"));
  EXPECT_TRUE(NoCheckLeft());
}

TEST(ShrinkRecoveryTest, ASlowRankThatStillRunsIsNotLost) {
  REQUIRE_LAUNCHER();
  const Outcome outcome = RunShrinkCheck(3, "--steps=2 --slow_rank=1 --slow_ms=1200",
                                         "--rdzv_conf=heartbeat_timeout=1");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output, Not(HasSubstr("was lost")));
  EXPECT_THAT(outcome.output, HasSubstr("rank 1: done world=3 rank=1 steps=2 recoveries=0"));
}

TEST(ShrinkRecoveryTest, BelowMinRanksTheRunStopsCleanly) {
  REQUIRE_LAUNCHER();
  const Outcome outcome =
      RunShrinkCheck(3, "--steps=50 --kill_rank=1 --kill_at_step=2", "--min_ranks=3");
  EXPECT_EQ(outcome.exit_code, 137) << outcome.output;
  EXPECT_THAT(outcome.output,
              HasSubstr("2 ranks left, fewer than --min_ranks=3; stopping every rank"));
  EXPECT_THAT(outcome.output, Not(HasSubstr("done world")));
  EXPECT_TRUE(NoCheckLeft());
}

TEST(ShrinkRecoveryTest, ALayoutTheSurvivorsCannotKeepIsAClearErrorAndAFailedRun) {
  REQUIRE_LAUNCHER();
  const Outcome outcome =
      RunShrinkCheck(4, "--steps=5 --tensor_parallel=2 --kill_rank=1 --kill_at_step=2");
  EXPECT_NE(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output,
              HasSubstr("layout DP=2 × TP=2 × PP=1 cannot be kept by the 3 surviving ranks: "
                        "expected a multiple of TP × PP = 2"));
  EXPECT_TRUE(NoCheckLeft());
}

// Two launchers on loopback: a rank of node 1 is lost; node 1's launcher
// publishes it in node 0's store and every survivor, on both nodes, goes on.
TEST(ShrinkRecoveryTest, ARankLostOnAnotherNodeIsRecoveredFromOnEveryNode) {
  REQUIRE_LAUNCHER();
  const std::string port = std::to_string(infini::testing::UnusedPortBelowEphemeralRange());
  std::string command = "env INFINI_RUN_TOKEN=shrink-test-token-0123456789 sh -c '";
  for (int node = 0; node < 2; ++node) {
    command += kBinDir + "/infini_run --nnodes=2 --node_rank=" + std::to_string(node) +
               " --nproc_per_node=2 --rdzv_endpoint=127.0.0.1:" + port +
               " --rdzv_id=shrink_two_nodes --on_failure=shrink --ccl_backend=gloo -- " +
               kShrinkCheck + " --steps=5 --kill_rank=2 --kill_at_step=3 & ";
  }
  command += "wait %1; a=$?; wait %2; b=$?; echo \"exit codes $a $b\"'";
  const Outcome outcome = RunShell(command);
  EXPECT_THAT(outcome.output, HasSubstr("exit codes 0 0")) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("rank 0: done world=3 rank=0 steps=5 recoveries=1"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 1: done world=3 rank=1 steps=5 recoveries=1"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 3: done world=3 rank=2 steps=5 recoveries=1"));
  EXPECT_THAT(outcome.output, HasSubstr("lost rank 2 (local rank 0"));
  EXPECT_TRUE(NoCheckLeft());
}

// Three launchers of one rank each: node 2's only rank is lost. Its launcher
// publishes the loss and waits for the others instead of ending the run.
TEST(ShrinkRecoveryTest, ANodeWhoseEveryRankWasLostWaitsForTheOthersToFinish) {
  REQUIRE_LAUNCHER();
  const std::string port = std::to_string(infini::testing::UnusedPortBelowEphemeralRange());
  std::string command = "env INFINI_RUN_TOKEN=shrink-test-token-0123456789 sh -c '";
  for (int node = 0; node < 3; ++node) {
    command += kBinDir + "/infini_run --nnodes=3 --node_rank=" + std::to_string(node) +
               " --nproc_per_node=1 --rdzv_endpoint=127.0.0.1:" + port +
               " --rdzv_id=shrink_three_nodes --on_failure=shrink --ccl_backend=gloo -- " +
               kShrinkCheck + " --steps=5 --kill_rank=2 --kill_at_step=3 & ";
  }
  command += "wait %1; a=$?; wait %2; b=$?; wait %3; c=$?; echo \"exit codes $a $b $c\"'";
  const Outcome outcome = RunShell(command);
  EXPECT_THAT(outcome.output, HasSubstr("exit codes 0 0 0")) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("rank 0: done world=2 rank=0 steps=5 recoveries=1"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 1: done world=2 rank=1 steps=5 recoveries=1"));
  EXPECT_THAT(outcome.output, HasSubstr("1 rank lost, the run finished without them"));
  EXPECT_TRUE(NoCheckLeft());
}

// Joiners (Context::AdmitJoiners): launch rank 0 plays the joining node's
// launcher (shrink_check --joiner_at_step, the keys of loss_notice.h); the
// survivors admit the joiner at a step boundary and every later sum counts
// it. The launcher's own side is tested in tests/launch and with gpt2.
TEST(ShrinkRecoveryTest, AJoinerIsAdmittedAtAStepBoundaryAndEverySumCountsIt) {
  REQUIRE_LAUNCHER();
  const TraceFolder trace_dir;
  const Outcome outcome = RunShrinkCheck(3, "--steps=8 --joiner_at_step=3", trace_dir.Flag());
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("rank 3: joined: world 4 ranks, rank 3, generation 1"));
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(outcome.output, HasSubstr("rank " + std::to_string(rank) +
                                          ": admitted 3 at step 3;"
                                          " world now 4 ranks, rank " +
                                          std::to_string(rank) + ", generation 1"));
  }
  EXPECT_THAT(outcome.output, HasSubstr("rank 3: done world=4 rank=3 steps=8 recoveries=0"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 0: done world=4 rank=0 steps=8 recoveries=0"));
  EXPECT_THAT(outcome.output, Not(HasSubstr("WRONG")));
  EXPECT_TRUE(NoCheckLeft());

  // Traced: the survivors' admission and world group remade, the joiner's wait.
  const Json trace = ReadJsonFile(trace_dir.path() + "/trace.json");
  for (int lane = 0; lane < 3; ++lane) {
    if (const Json* admit = OneFaultEvent(trace, "admit_joiners", lane)) {
      const Json& args = (*admit)["args"];
      EXPECT_EQ(Numbers(args["joined_ranks"]), std::vector<double>{3});
      EXPECT_EQ(args["old_world_size"].number, 3);
      EXPECT_EQ(args["new_world_size"].number, 4);
      EXPECT_EQ(args["new_rank"].number, lane);
      EXPECT_EQ(args["generation"].number, 1);
    }
    const auto remade = FaultEventsOf(trace, "remake_group");
    ASSERT_TRUE(remade.count(lane)) << DescribeFaultEvents(trace);
    EXPECT_EQ((*remade.at(lane)[0])["args"]["new_size"].number, 4);
  }
  if (const Json* wait = OneFaultEvent(trace, "wait_to_be_admitted", 3)) {
    EXPECT_EQ((*wait)["args"]["world_size"].number, 4);
    EXPECT_EQ((*wait)["args"]["rank"].number, 3);
  }
}

TEST(ShrinkRecoveryTest, AJoinerAfterALossIsNumberedAfterTheSurvivors) {
  REQUIRE_LAUNCHER();
  const Outcome outcome =
      RunShrinkCheck(3, "--steps=8 --kill_rank=1 --kill_at_step=2 --joiner_at_step=4");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("rank 3: joined: world 3 ranks, rank 2, generation 2"));
  EXPECT_THAT(outcome.output,
              HasSubstr("rank 2: admitted 3 at step 4; world now 3 ranks, rank 1, generation 2"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 3: done world=3 rank=2 steps=8 recoveries=0"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 2: done world=3 rank=1 steps=8 recoveries=1"));
  EXPECT_THAT(outcome.output, Not(HasSubstr("WRONG")));
  EXPECT_TRUE(NoCheckLeft());
}

// A group that holds the whole world in another order cannot be remade with
// the joiners without renumbering it: every rank refuses the admission in
// one line naming the group, and the run fails rather than reorders it.
#ifdef KVTEST_PLUGIN_PATH
// A reducer's buckets follow the world's communicator through a loss: on
// kvtest (which registers and logs it), each survivor's two buckets are
// registered with the first communicator, only forgotten when it is
// aborted after the shrink, registered with the shrunk one and deregistered
// from it at the end; the killed rank's never end. Traced: the buckets of
// launch rank 2 (renumbered 1 by the shrink) stay in lane 2, and the lost
// rank's lane gets none after the loss.
TEST(ShrinkRecoveryTest, AReducersBucketsAreRegisteredAgainWithTheShrunkCommunicator) {
  REQUIRE_LAUNCHER();
  const std::string log = "/tmp/shrink_registration_" + std::to_string(getpid()) + ".log";
  std::remove(log.c_str());
  const TraceFolder trace_dir;
  const Outcome outcome = RunShell(
      "env KVTEST_REGISTRATION_LOG=" + log + " " + kBinDir +
      "/infini_run --nproc_per_node=3 --on_failure=shrink --ccl_backend=" KVTEST_PLUGIN_PATH
      " --term_timeout=2 " +
      trace_dir.Flag() + " -- " + kShrinkCheck +
      " --steps=4 --kill_rank=1 --kill_at_step=2 --reducer");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("rank 2: done world=2")) << outcome.output;
  const auto summary = infini::parallel::testing::ReadRegistrationLog(log);
  std::remove(log.c_str());
  EXPECT_EQ(summary.problems, "");
  EXPECT_EQ(summary.registered, 3 * 2 + 2 * 2);  // every rank's first, the survivors' shrunk
  EXPECT_EQ(summary.ended_by_abort, 2 * 2);      // the survivors' first communicators
  EXPECT_EQ(summary.deregistered, 2 * 2);        // from the shrunk ones, at the end
  EXPECT_EQ(summary.never_ended, 2);             // the killed rank's

  const Json trace = ReadJsonFile(trace_dir.path() + "/trace.json");
  const auto buckets = infini::testing::SpansOf(trace, "bucket");
  const auto shrinks = FaultEventsOf(trace, "shrink");
  ASSERT_TRUE(shrinks.count(2)) << DescribeFaultEvents(trace);
  const double shrunk_at = (*shrinks.at(2)[0])["ts"].number;
  auto after_the_shrink = [&](int lane) {
    size_t count = 0;
    if (buckets.count(lane)) {
      for (const auto& span : buckets.at(lane)) count += span.begin_us > shrunk_at;
    }
    return count;
  };
  EXPECT_GT(after_the_shrink(2), 0u) << "no bucket of launch rank 2 after its shrink";
  EXPECT_EQ(after_the_shrink(1), 0u) << "buckets in the lost rank's lane after the shrink";
}
#endif

TEST(ShrinkRecoveryTest, AnAdmissionRefusesAGroupOfTheWholeWorldInAnotherOrder) {
  REQUIRE_LAUNCHER();
  const Outcome outcome = RunShrinkCheck(3, "--steps=6 --joiner_at_step=2 --reordered_world_group");
  EXPECT_NE(outcome.exit_code, 0) << outcome.output;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(outcome.output,
                HasSubstr("rank " + std::to_string(rank) + ": admission refused: rank " +
                          std::to_string(rank) + "/3"));
  }
  EXPECT_THAT(outcome.output,
              HasSubstr("process group 'reordered' holds the whole world in another order "
                        "[2, 1, 0]: expected 0..2 in order to admit joiners"));
  EXPECT_THAT(outcome.output, Not(HasSubstr("admitted 3")));
  EXPECT_TRUE(NoCheckLeft());
}

}  // namespace
