// Process groups of thread ranks inside this one process, on the gloo
// backend: the store lives in the process, so no launcher is needed.
#include "infini/parallel/process_group.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "infini/parallel/context.h"
#include "infini/parallel/errors.h"

namespace infini::parallel {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::shared_ptr<Context> MakeContext(int thread_rank, int threads, Environment environment = {}) {
  ContextOptions options;
  options.thread_rank = thread_rank;
  options.threads_per_process = threads;
  options.backend = "gloo";
  options.environment = std::move(environment);
  return Context::Create(options);
}

// Runs `body` as `threads` ranks of this process; returns each rank's error
// text ("" when it succeeded).
std::vector<std::string> RunRanks(int threads, const std::function<void(Context&)>& body,
                                  const Environment& environment = {}) {
  std::vector<std::string> errors(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        auto context = MakeContext(t, threads, environment);
        body(*context);
      } catch (const std::exception& error) {
        errors[static_cast<size_t>(t)] = error.what();
      }
    });
  }
  for (auto& worker : workers) worker.join();
  return errors;
}

// Sums one float per rank over `group` and returns the result.
float SumOver(ProcessGroup& group, Context& context, float value) {
  ccl::DeviceBuffer buffer(context.backend(), sizeof(float));
  buffer.CopyFromHost(&value, sizeof(float));
  auto tensor = buffer.AsTensor(ccl::dtype::kFloat32, 1);
  group.AllReduce(tensor, tensor, ccl::ReduceOp::kSum);
  float result = 0;
  buffer.CopyToHost(&result, sizeof(float));
  return result;
}

TEST(ProcessGroupTest, ThreadRanksOfOneProcessReduceTogether) {
  std::vector<float> sums(4, 0);
  auto errors = RunRanks(4, [&](Context& context) {
    auto world = context.NewWorldGroup();
    EXPECT_EQ(world->size(), 4);
    EXPECT_EQ(world->rank(), context.rank().global_rank());
    sums[static_cast<size_t>(context.rank().global_rank())] =
        SumOver(*world, context, static_cast<float>(context.rank().global_rank() + 1));
  });
  EXPECT_EQ(errors, std::vector<std::string>(4));
  EXPECT_EQ(sums, std::vector<float>(4, 10.0f));
}

TEST(ProcessGroupTest, GroupsWithOneNameButOtherMembersNeverMix) {
  std::vector<float> sums(4, 0);
  auto errors = RunRanks(4, [&](Context& context) {
    const int me = context.rank().global_rank();
    auto pair = context.NewGroup("pair", me < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3});
    sums[static_cast<size_t>(me)] = SumOver(*pair, context, static_cast<float>(me));
  });
  EXPECT_EQ(errors, std::vector<std::string>(4));
  EXPECT_EQ(sums, (std::vector<float>{1, 1, 5, 5}));
}

TEST(ProcessGroupTest, AGroupMadeTwiceGetsItsOwnCommunicator) {
  auto errors = RunRanks(2, [&](Context& context) {
    auto first = context.NewWorldGroup();
    auto second = context.NewWorldGroup();  // same name, same members: next generation
    EXPECT_EQ(SumOver(*second, context, 1.0f), 2.0f);
    EXPECT_EQ(SumOver(*first, context, 2.0f), 4.0f);
    first.reset();
    auto third = context.NewWorldGroup();
    EXPECT_EQ(SumOver(*third, context, 3.0f), 6.0f);
  });
  EXPECT_EQ(errors, std::vector<std::string>(2));
}

TEST(ProcessGroupTest, WorkReportsCompletion) {
  auto errors = RunRanks(2, [&](Context& context) {
    auto world = context.NewWorldGroup();
    ccl::DeviceBuffer buffer(context.backend(), sizeof(float) * 8);
    auto tensor = buffer.AsTensor(ccl::dtype::kFloat32, 8);
    auto work = world->AllReduceAsync(tensor, tensor, ccl::ReduceOp::kSum);
    EXPECT_TRUE(work->Wait(std::chrono::seconds(30)));
    EXPECT_TRUE(work->IsCompleted());
    EXPECT_EQ(work->error(), nullptr);
    EXPECT_THAT(work->Describe(),
                AllOf(HasSubstr("all_reduce #0 on group 'world'"), HasSubstr("32 bytes")));
    world->Barrier();
  });
  EXPECT_EQ(errors, std::vector<std::string>(2));
}

TEST(ProcessGroupTest, DebugModeReportsAMismatchOnEveryRankNamingBothCalls) {
  auto errors = RunRanks(3,
                         [&](Context& context) {
                           auto world = context.NewWorldGroup();
                           ccl::DeviceBuffer buffer(context.backend(), sizeof(float) * 6);
                           auto one = buffer.AsTensor(ccl::dtype::kFloat32, 2);
                           auto all = buffer.AsTensor(ccl::dtype::kFloat32, 6);
                           world->AllReduce(one, one, ccl::ReduceOp::kSum);  // agreed
                           if (context.rank().global_rank() == 1) {
                             world->AllGather(one, all);
                           } else {
                             world->AllReduce(one, one, ccl::ReduceOp::kSum);
                           }
                         },
                         {{"INFINI_CCL_DEBUG", "DETAIL"}});
  for (const std::string& error : errors) {
    EXPECT_THAT(error,
                AllOf(HasSubstr("collective mismatch on process group 'world'"),
                      HasSubstr("collective #1"), HasSubstr("global rank 1 called all_gather"),
                      HasSubstr("all_reduce(dtype=float32, count=2, op=sum)")));
  }
}

TEST(ProcessGroupTest, DebugModeReportsDifferentSizes) {
  auto errors = RunRanks(2,
                         [&](Context& context) {
                           auto world = context.NewWorldGroup();
                           ccl::DeviceBuffer buffer(context.backend(), sizeof(float) * 4);
                           auto tensor = buffer.AsTensor(ccl::dtype::kFloat32,
                                                         2 + context.rank().global_rank());
                           world->AllReduce(tensor, tensor, ccl::ReduceOp::kSum);
                         },
                         {{"INFINI_CCL_DEBUG", "DETAIL"}});
  for (const std::string& error : errors) {
    EXPECT_THAT(error, AllOf(HasSubstr("count=2"), HasSubstr("count=3")));
  }
}

// The watchdog without a launcher: the process ends by itself, naming the
// collective that never completed.
TEST(ProcessGroupDeathTest, WatchdogEndsTheProcessWhenARankSkipsACollective) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        RunRanks(2,
                 [&](Context& context) {
                   auto world = context.NewWorldGroup();
                   SumOver(*world, context, 1.0f);
                   if (context.rank().global_rank() == 1) {
                     std::this_thread::sleep_for(std::chrono::seconds(60));
                     return;
                   }
                   SumOver(*world, context, 1.0f);
                 },
                 {{"INFINI_CCL_TIMEOUT_S", "1"}});
        std::exit(0);
      },
      ::testing::ExitedWithCode(kWatchdogExitCode),
      "all_reduce #1 on group 'world' \\(4 bytes, global rank 0\\) did not complete within "
      "INFINI_CCL_TIMEOUT_S=1 s");
}

TEST(ProcessGroupTest, CollectiveOnAGroupOfOtherRanksIsAClearError) {
  auto errors = RunRanks(2, [&](Context& context) {
    auto solo = context.NewGroup("solo", {0});
    EXPECT_EQ(solo->is_member(), context.rank().global_rank() == 0);
    SumOver(*solo, context, 1.0f);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_THAT(errors[1], AllOf(HasSubstr("all_reduce on process group 'solo'"),
                               HasSubstr("global rank 1 is not a member (members: 0)")));
}

// The public accessor GradientReducer allocates through (it was a friend of
// the group's internals).
TEST(ProcessGroupTest, AGroupNamesTheBackendItsCommunicatorRunsOn) {
  auto errors = RunRanks(2, [&](Context& context) {
    auto world = context.NewWorldGroup();
    auto solo = context.NewGroup("solo", {0});  // global rank 1 is not a member
    EXPECT_EQ(world->backend(), context.backend());
    EXPECT_EQ(solo->backend(), context.backend());
    EXPECT_EQ(world->backend()->info().name, "gloo");
  });
  EXPECT_EQ(errors, std::vector<std::string>(2));
}

// A group sees its rank through what it was given (backend, store, rank,
// timeouts), not through the Context: it works on after the Context is gone.
TEST(ProcessGroupTest, AGroupKeepsWorkingAfterItsContextIsGone) {
  std::vector<float> sums(2, 0);
  std::vector<std::string> errors(2);
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      try {
        auto context = MakeContext(t, 2);
        auto world = context->NewWorldGroup();
        const int me = context->rank().global_rank();
        context.reset();
        ccl::DeviceBuffer buffer(world->backend(), sizeof(float));
        const float value = static_cast<float>(me + 1);
        buffer.CopyFromHost(&value, sizeof(float));
        auto tensor = buffer.AsTensor(ccl::dtype::kFloat32, 1);
        world->AllReduce(tensor, tensor, ccl::ReduceOp::kSum);
        buffer.CopyToHost(&sums[static_cast<size_t>(me)], sizeof(float));
        world->Barrier();
      } catch (const std::exception& error) {
        errors[static_cast<size_t>(t)] = error.what();
      }
    });
  }
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(errors, std::vector<std::string>(2));
  EXPECT_EQ(sums, (std::vector<float>{3, 3}));
}

TEST(ProcessGroupTest, RefusesBadMemberLists) {
  auto context = MakeContext(0, 1);
  EXPECT_THROW(context->NewGroup("twice", {0, 0}), ParallelUsageError);
  EXPECT_THROW(context->NewGroup("outside", {0, 1}), ParallelUsageError);
  EXPECT_THROW(context->NewGroup("", {0}), ParallelUsageError);
  EXPECT_THROW(context->NewGroup("a/b", {0}), ParallelUsageError);
  EXPECT_THROW(context->NewLayoutGroup(Layout(2, 1, 1), Axis::kData), ParallelConfigError);
}

TEST(ProcessGroupTest, ContextRefusesABadEnvironmentWithOneLine) {
  try {
    MakeContext(0, 1, {{"INFINI_CCL_TIMEOUT_S", "soon"}});
    FAIL() << "expected ParallelConfigError";
  } catch (const ParallelConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("INFINI_CCL_TIMEOUT_S='soon'"));
  }
}

TEST(ProcessGroupTest, KeysAreNamespacedByRunAndRestart) {
  auto context =
      MakeContext(0, 1, {{"INFINI_RUN_ID", "job7"}, {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_EQ(context->key_namespace(), "job7/2");
}

// --on_failure=shrink inside one process: a loss notice in the store (as
// infini_run writes it) revokes every group; a work that completed on a
// revoked communicator and any later call are PeerLostError, and
// RecoverFromLoss refuses thread ranks in one line.
TEST(ProcessGroupTest, ALossNoticeRevokesGroupsAndTheirWorkIsPeerLost) {
  std::vector<std::string> seen(2);
  auto errors = RunRanks(
      2,
      [&](Context& context) {
        auto world = context.NewWorldGroup();
        ccl::DeviceBuffer buffer(context.backend(), sizeof(float));
        const auto tensor = buffer.AsTensor(ccl::dtype::kFloat32, 1);
        auto work = world->AllReduceAsync(tensor, tensor, ccl::ReduceOp::kSum);
        while (!work->IsCompleted()) std::this_thread::yield();
        world->Barrier();
        // The notice is heard at once: it must not come
        // while a rank is still inside the barrier.
        context.store().Set("past_barrier/" + std::to_string(context.rank().global_rank()), "");
        if (context.rank().global_rank() == 0) {
          context.store().Wait({"past_barrier/0", "past_barrier/1"}, std::chrono::seconds(30));
          context.store().Set("loss/1", "ranks=1 at_ms=1 how=killed by SIGKILL");
          context.store().Add("loss/count", 1);
        }
        while (!context.LossPending()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        std::string& what = seen[static_cast<size_t>(context.rank().global_rank())];
        try {
          work->Wait();
        } catch (const PeerLostError& error) {
          what += std::string("wait: ") + error.what() + "\n";
        }
        try {
          world->AllReduce(tensor, tensor, ccl::ReduceOp::kSum);
        } catch (const PeerLostError& error) {
          what += std::string("next: ") + error.what() + "\n";
        }
        try {
          context.RecoverFromLoss();
        } catch (const ParallelUsageError& error) {
          what += std::string("recover: ") + error.what();
        }
      },
      {{"INFINI_ON_FAILURE", "shrink"}});
  EXPECT_EQ(errors, std::vector<std::string>(2));
  for (const std::string& what : seen) {
    EXPECT_THAT(what, HasSubstr("wait: all_reduce #0 on group 'world'"));
    EXPECT_THAT(what, HasSubstr("a rank of the run was lost while it ran (--on_failure=shrink)"));
    EXPECT_THAT(what, HasSubstr("next: all_reduce on process group 'world': a rank of the run was "
                                "lost"));
    EXPECT_THAT(what, HasSubstr("recover: RecoverFromLoss: threads_per_process=2: expected 1"));
  }
}

}  // namespace
}  // namespace infini::parallel
