// gradient_reducer_check: every rank runs the GradientReducer checks of
// reducer_scenarios.h over the world group and prints one line, e.g.
//   infini_run --nproc_per_node=2 --ccl_backend=gloo bin/gradient_reducer_check
//   --threads_per_process=2
// Exit status 1 when any rank saw a difference.
#include <gflags/gflags.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "infini/common/flags.h"
#include "infini/parallel/context.h"
#include "infini/parallel/process_group.h"
#include "reducer_scenarios.h"

DEFINE_int32(threads_per_process, 1, "Ranks (threads) in each process");
DEFINE_uint64(seed, 1, "Seed of the random gradient sizes (the same on every rank)");

namespace {

std::string RunChecks(infini::parallel::Context& context) {
  auto world = context.NewWorldGroup();
  using namespace infini::parallel::testing;
  std::string failure = CheckBucketsMatchPlainAllReduce(context, *world, FLAGS_seed);
  if (failure.empty())
    failure = CheckAccumulationCommunicatesOnlyOnTheLastMicroStep(context, *world);
  world->Barrier();
  return failure;
}

}  // namespace

int main(int argc, char** argv) {
  infini::flags::Parse(&argc, &argv, "gradient_reducer_check [FLAGS]");
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int thread_rank = 0; thread_rank < FLAGS_threads_per_process; ++thread_rank) {
    threads.emplace_back([thread_rank, &failures] {
      std::string rank_name = "thread " + std::to_string(thread_rank);
      try {
        infini::parallel::ContextOptions options;
        options.thread_rank = thread_rank;
        options.threads_per_process = FLAGS_threads_per_process;
        auto context = infini::parallel::Context::Create(options);
        rank_name = "rank " + std::to_string(context->rank().global_rank()) + "/" +
                    std::to_string(context->rank().world_size());
        const std::string failure = RunChecks(*context);
        if (failure.empty()) {
          std::printf("%s: gradient reducer OK\n", rank_name.c_str());
        } else {
          std::printf("%s: FAILED: %s\n", rank_name.c_str(), failure.c_str());
          ++failures;
        }
      } catch (const std::exception& error) {
        std::printf("%s: FAILED: %s\n", rank_name.c_str(), error.what());
        std::fflush(stdout);
        // The process's other thread ranks would wait for this one until the
        // watchdog's timeout: stop them now.
        std::_Exit(1);
      }
      std::fflush(stdout);
    });
  }
  for (auto& thread : threads) thread.join();
  return failures == 0 ? 0 : 1;
}
