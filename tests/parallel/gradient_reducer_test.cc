// GradientReducer: its bucket layout, its results against a plain all_reduce
// in thread ranks of this process and in processes under infini_run (gloo),
// gradient accumulation, and the one-line errors of a wrong use.
#include "infini/parallel/gradient_reducer.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "buffer_registry.h"
#include "infini/ccl/memory_bootstrap_store.h"
#include "infini/parallel/context.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/process_group.h"
#include "reducer_layout.h"
#include "reducer_scenarios.h"
#include "registration_log.h"

namespace infini::parallel {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// ---- Layout ----

std::vector<GradientSpec> Floats(const std::vector<size_t>& counts) {
  std::vector<GradientSpec> specs;
  for (size_t i = 0; i < counts.size(); ++i) {
    specs.push_back({"g" + std::to_string(i), ccl::dtype::kFloat32, counts[i]});
  }
  return specs;
}

TEST(ReducerLayoutTest, GradientsFillBucketsInOrderAndALargeOneIsAlone) {
  // 100-byte buckets: 10+10 floats = 80 B; 30 floats alone; then 5+5.
  const auto layout = internal::PlanReducerLayout(Floats({10, 10, 30, 5, 5}), 100);
  ASSERT_EQ(layout.buckets.size(), 3u);
  EXPECT_EQ(layout.buckets[0].gradients, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(layout.buckets[1].gradients, (std::vector<size_t>{2}));
  EXPECT_EQ(layout.buckets[2].gradients, (std::vector<size_t>{3, 4}));
  // Contiguous in the order given, and each bucket covers its gradients.
  size_t offset = 0;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(layout.gradients[i].offset, offset);
    offset += std::vector<size_t>{10, 10, 30, 5, 5}[i];
  }
  EXPECT_EQ(layout.buckets[1].offset, 20u);
  EXPECT_EQ(layout.buckets[1].count, 30u);
  EXPECT_EQ(layout.storages.at(0).count, 60u);
}

TEST(ReducerLayoutTest, EachDtypeHasItsOwnStorageAndBuckets) {
  std::vector<GradientSpec> specs = {{"w", ccl::dtype::kFloat32, 4},
                                     {"h", ccl::dtype::kBFloat16, 4},
                                     {"b", ccl::dtype::kFloat32, 4}};
  const auto layout = internal::PlanReducerLayout(specs, 1 << 20);
  ASSERT_EQ(layout.storages.size(), 2u);
  EXPECT_EQ(layout.gradients[2].storage, 0u);
  EXPECT_EQ(layout.gradients[2].offset, 4u);
  EXPECT_EQ(layout.gradients[1].storage, 1u);
  EXPECT_EQ(layout.gradients[1].offset, 0u);
  ASSERT_EQ(layout.buckets.size(), 2u);
  EXPECT_EQ(layout.buckets[0].gradients, (std::vector<size_t>{0, 2}));
}

// ---- Thread ranks of this process (gloo) ----

std::vector<std::string> RunRanks(int threads, const std::function<std::string(Context&)>& body,
                                  const std::string& backend = "gloo") {
  std::vector<std::string> outcomes(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        ContextOptions options;
        options.thread_rank = t;
        options.threads_per_process = threads;
        options.backend = backend;
        options.environment = Environment{};
        auto context = Context::Create(options);
        outcomes[static_cast<size_t>(t)] = body(*context);
      } catch (const std::exception& error) {
        outcomes[static_cast<size_t>(t)] = error.what();
      }
    });
  }
  for (auto& worker : workers) worker.join();
  return outcomes;
}

class ReducerInThreadRanksTest : public ::testing::TestWithParam<int> {};

TEST_P(ReducerInThreadRanksTest, BucketsAreBitIdenticalToAPlainAllReduceOfEachGradient) {
  for (uint64_t seed : {1u, 2u}) {
    auto outcomes = RunRanks(GetParam(), [&](Context& context) {
      if (!context.backend()->capabilities().Supports(ccl::Collective::kAllReduce,
                                                      ccl::dtype::kBFloat16, ccl::ReduceOp::kAvg)) {
        return std::string("gloo does not average bfloat16: the mixed-dtype case is untested");
      }
      auto world = context.NewWorldGroup();
      return testing::CheckBucketsMatchPlainAllReduce(context, *world, seed);
    });
    EXPECT_EQ(outcomes, std::vector<std::string>(static_cast<size_t>(GetParam())))
        << "seed " << seed;
  }
}

TEST_P(ReducerInThreadRanksTest, AccumulationCommunicatesOnlyOnTheLastMicroStep) {
  auto outcomes = RunRanks(GetParam(), [&](Context& context) {
    auto world = context.NewWorldGroup();
    return testing::CheckAccumulationCommunicatesOnlyOnTheLastMicroStep(context, *world);
  });
  EXPECT_EQ(outcomes, std::vector<std::string>(static_cast<size_t>(GetParam())));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ReducerInThreadRanksTest, ::testing::Values(2, 3),
                         [](const auto& param_info) {
                           return std::to_string(param_info.param) + "Ranks";
                         });

// ---- Registration (kvtest registers and logs each event) ----

#ifdef KVTEST_PLUGIN_PATH
// One step on gradients 10, 10 | 30 | 5, 5 floats (three buckets), then the
// reducer ends before the group. `register_buckets` as given.
std::string OneStep(Context& context, bool register_buckets) {
  auto world = context.NewWorldGroup();
  GradientReducer reducer(
      *world, Floats({10, 10, 30, 5, 5}),
      {.bucket_bytes = 100, .average = false, .register_buckets = register_buckets});
  if (reducer.num_buckets() != 3) return "expected 3 buckets";
  const auto compute = ccl::Stream::Default(context.backend());
  for (size_t i = 0; i < reducer.size(); ++i) reducer.MarkReady(i, compute);
  reducer.WaitAll(compute);
  compute.Synchronize();
  return "";
}

class ReducerRegistrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = ::testing::TempDir() + "reducer_registration_" + std::to_string(getpid()) + ".log";
    std::remove(log_.c_str());
    setenv("KVTEST_REGISTRATION_LOG", log_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("KVTEST_REGISTRATION_LOG");
    std::remove(log_.c_str());
  }
  std::string log_;
};

TEST_F(ReducerRegistrationTest, EveryBucketIsRegisteredOnceAndDeregisteredBeforeItsMemoryGoes) {
  const auto outcomes = RunRanks(
      2, [](Context& context) { return OneStep(context, true); }, KVTEST_PLUGIN_PATH);
  EXPECT_EQ(outcomes, std::vector<std::string>(2));
  const auto summary = testing::ReadRegistrationLog(log_);
  EXPECT_EQ(summary.problems, "");
  EXPECT_EQ(summary.never_ended, 0);
  EXPECT_EQ(summary.registered, 2 * 3);  // 2 ranks × 3 buckets
  EXPECT_EQ(summary.deregistered, 2 * 3);
  EXPECT_EQ(summary.ended_by_abort, 0);
  EXPECT_EQ(summary.communicators, 2);
}

// What a group does when its communicator is replaced (group_creation.cc):
// after a loss the old one is only forgotten, then aborted, and the buffer
// registered with the shrunk one; at an admission it is deregistered before
// the old one is destroyed and registered with the new one.
TEST_F(ReducerRegistrationTest, ARegistrationFollowsTheCommunicatorThatReplacesItsOwn) {
  const auto backend = ccl::Backend::Load(KVTEST_PLUGIN_PATH);
  const auto store = std::make_shared<ccl::MemoryBootstrapStore>();
  const ccl::UniqueId id = backend->GetUniqueId(store);
  ccl::Communicator first = std::move(
      backend->CommInitRanks(1, id, std::vector<int>{0}, std::vector<int>{0}, {}, store).at(0));
  ccl::DeviceBuffer buffer(backend, 64);
  internal::BufferRegistry registry("world");
  const uint64_t entry = registry.Add(first, buffer.data(), buffer.bytes());
  ccl::Communicator shrunk = first.Shrink({}, ccl::ShrinkMode::kAbort);
  registry.ForgetAll();  // revoked: never deregistered there
  first.Abort();
  registry.RegisterAll(shrunk);
  // An admission: deregistered, destroyed, registered with the remade one.
  ccl::Communicator remade = shrunk.Shrink({});
  registry.DeregisterAll();
  shrunk.Destroy();
  registry.RegisterAll(remade);
  registry.Remove(entry);  // the reducer ends
  remade.Destroy();
  const auto summary = testing::ReadRegistrationLog(log_);
  EXPECT_EQ(summary.problems, "");
  EXPECT_EQ(summary.never_ended, 0);
  EXPECT_EQ(summary.registered, 3);  // once per communicator
  EXPECT_EQ(summary.ended_by_abort, 1);
  EXPECT_EQ(summary.deregistered, 2);
  EXPECT_EQ(summary.communicators, 3);
}

TEST_F(ReducerRegistrationTest, RegisterBucketsOffRegistersNothing) {
  const auto outcomes = RunRanks(
      2, [](Context& context) { return OneStep(context, false); }, KVTEST_PLUGIN_PATH);
  EXPECT_EQ(outcomes, std::vector<std::string>(2));
  EXPECT_EQ(testing::ReadRegistrationLog(log_).registered, 0);
}
#endif

// ---- Wrong use: one rank is enough ----

// Runs `misuse` on a reducer of gradients a, b | c (two buckets) in a
// one-rank world and returns the ParallelUsageError's text.
std::string UsageError(const std::function<void(GradientReducer&, const ccl::Stream&)>& misuse) {
  auto outcomes = RunRanks(1, [&](Context& context) -> std::string {
    auto world = context.NewWorldGroup();
    GradientReducer reducer(*world,
                            {{"a", ccl::dtype::kFloat32, 4},
                             {"b", ccl::dtype::kFloat32, 4},
                             {"c", ccl::dtype::kFloat32, 8}},
                            {.bucket_bytes = 32});
    EXPECT_EQ(reducer.num_buckets(), 2u);
    const auto compute = ccl::Stream::Default(context.backend());
    try {
      misuse(reducer, compute);
    } catch (const ParallelUsageError& error) {
      return error.what();
    }
    return "no ParallelUsageError";
  });
  return outcomes.at(0);
}

TEST(ReducerUsageTest, AGradientMarkedTwiceInOneStepIsNamed) {
  const std::string error = UsageError([](GradientReducer& reducer, const ccl::Stream& compute) {
    reducer.MarkReady(1, compute);
    reducer.MarkReady(1, compute);
  });
  EXPECT_THAT(error, AllOf(HasSubstr("gradient 'b' (index 1)"), HasSubstr("twice")));
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

TEST(ReducerUsageTest, AnIndexOutOfRangeIsNamed) {
  const std::string error = UsageError(
      [](GradientReducer& reducer, const ccl::Stream& compute) { reducer.MarkReady(3, compute); });
  EXPECT_THAT(error, AllOf(HasSubstr("MarkReady"), HasSubstr("index 3"), HasSubstr("0..3")));
  EXPECT_THAT(UsageError([](GradientReducer& reducer, const ccl::Stream&) { reducer.Gradient(7); }),
              HasSubstr("index 7"));
}

TEST(ReducerUsageTest, WaitAllBeforeEveryGradientIsReadyNamesTheFirstMissing) {
  const std::string error = UsageError([](GradientReducer& reducer, const ccl::Stream& compute) {
    reducer.MarkReady(0, compute);
    reducer.MarkReady(2, compute);
    reducer.WaitAll(compute);
  });
  EXPECT_THAT(error, AllOf(HasSubstr("WaitAll"), HasSubstr("gradient 'b' (index 1)"),
                           HasSubstr("not marked ready")));
}

TEST(ReducerUsageTest, WaitForABucketNotYetCompleteIsAnError) {
  const std::string error = UsageError([](GradientReducer& reducer, const ccl::Stream& compute) {
    reducer.MarkReady(0, compute);
    reducer.WaitFor(0, compute);
  });
  EXPECT_THAT(error, AllOf(HasSubstr("WaitFor"), HasSubstr("gradient 'b' (index 1)")));
}

TEST(ReducerUsageTest, AStepWithoutSynchronizationMayEndWithGradientsUnmarked) {
  const std::string error = UsageError([](GradientReducer& reducer, const ccl::Stream& compute) {
    reducer.SetSynchronize(false);
    reducer.MarkReady(0, compute);
    reducer.WaitAll(compute);
    reducer.MarkReady(0, compute);  // a new step
    reducer.WaitFor(2, compute);
    reducer.WaitAll(compute);
    reducer.SetSynchronize(true);
    for (size_t i = 0; i < 3; ++i) reducer.MarkReady(i, compute);
    reducer.WaitFor(2, compute);
    reducer.WaitAll(compute);
    reducer.MarkReady(0, compute);  // the first step after WaitAll
    reducer.MarkReady(0, compute);
  });
  EXPECT_THAT(error, HasSubstr("gradient 'a' (index 0) was marked ready twice"));
}

// ---- Processes under infini_run ----

const std::string kBinDir = INFINI_PARALLEL_BIN_DIR;

struct Outcome {
  int exit_code = -1;
  std::string output;
  bool timed_out = false;
};

// Runs `argv` with its output collected; kills its process group after
// `limit`.
Outcome RunProgram(const std::vector<std::string>& argv, std::chrono::seconds limit) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  Outcome outcome;
  auto drain = [&] {
    char buffer[4096];
    ssize_t got;
    while ((got = read(fds[0], buffer, sizeof(buffer))) > 0) outcome.output.append(buffer, got);
  };
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (;;) {
    drain();
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      outcome.timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  drain();
  close(fds[0]);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return outcome;
}

class ReducerInProcessesTest : public ::testing::TestWithParam<int> {};

TEST_P(ReducerInProcessesTest, TwoProcessesAgreeWithAPlainAllReduce) {
  if (access((kBinDir + "/infini_run").c_str(), X_OK) != 0) {
    GTEST_SKIP() << "bin/infini_run is not built";
  }
  const int threads = GetParam();
  const Outcome outcome = RunProgram(
      {kBinDir + "/infini_run", "--nproc_per_node=2", "--ccl_backend=gloo", "--",
       kBinDir + "/gradient_reducer_check", "--threads_per_process=" + std::to_string(threads)},
      std::chrono::seconds(120));
  EXPECT_FALSE(outcome.timed_out) << outcome.output;
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  const int world = 2 * threads;
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_THAT(outcome.output, HasSubstr("rank " + std::to_string(rank) + "/" +
                                          std::to_string(world) + ": gradient reducer OK"))
        << outcome.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, ReducerInProcessesTest, ::testing::Values(1, 2),
                         [](const auto& param_info) {
                           return "TwoProcessesOf" + std::to_string(param_info.param) + "Threads";
                         });

}  // namespace
}  // namespace infini::parallel
