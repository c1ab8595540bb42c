// Rank threads started all or none (rank_threads.h): a thread that cannot be
// made stops the ones made before they run, and is one ThreadStartError.
#include "infini/parallel/rank_threads.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <system_error>
#include <thread>

namespace infini::parallel {
namespace {

// A ThreadMaker whose call number `fail_at` (from 0) fails as std::thread's
// constructor does when the process is out of threads.
ThreadMaker FailingAt(int fail_at, std::atomic<int>* calls) {
  return [fail_at, calls](std::function<void()> run) {
    if (calls->fetch_add(1) == fail_at) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "thread creation");
    }
    return std::thread(std::move(run));
  };
}

TEST(RankThreads, EveryBodyRunsOnItsOwnThread) {
  std::atomic<int> sum{0};
  std::atomic<int> on_caller{0};
  const std::thread::id caller = std::this_thread::get_id();
  RunOnThreads(16, "test threads", [&](int index) {
    sum += index;
    if (std::this_thread::get_id() == caller) ++on_caller;
  });
  EXPECT_EQ(sum.load(), 15 * 16 / 2);
  EXPECT_EQ(on_caller.load(), 0);
}

// Bodies that meet each other (a barrier of all 8) would wait forever for
// the thread that was never made: none of them runs, and the error says
// which thread, of how many, for what, and why.
TEST(RankThreads, AThreadThatCannotBeMadeStopsTheOthersBeforeTheyRunAndIsOneError) {
  std::atomic<int> calls{0};
  std::atomic<int> ran{0};
  try {
    RunOnThreads(
        8, "the rank threads (--nthread_per_process=8)", [&](int) { ++ran; }, FailingAt(5, &calls));
    FAIL() << "no error";
  } catch (const ThreadStartError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("cannot start thread 6 of 8 for the rank threads "
                           "(--nthread_per_process=8): "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("Resource temporarily unavailable"), std::string::npos) << message;
    EXPECT_NE(message.find("the 5 started were stopped"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_EQ(calls.load(), 6);
  EXPECT_EQ(ran.load(), 0);
}

TEST(RankThreads, TheFirstThreadFailingStartsNothing) {
  std::atomic<int> calls{0};
  std::atomic<int> ran{0};
  EXPECT_THROW(RunOnThreads(
                   4, "test threads", [&](int) { ++ran; }, FailingAt(0, &calls)),
               ThreadStartError);
  EXPECT_EQ(ran.load(), 0);
}

// The real failure, not a stand-in: address space too small for the thread
// stacks (RLIMIT_AS holds for root too). Sanitizers reserve terabytes of
// address space, so the limit cannot be set under them.
TEST(RankThreads, StacksThatDoNotFitTheAddressSpaceLimitAreOneError) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve more address space than any limit set here";
#else
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &before), 0);
  // 256 threads of 8 MiB stacks (glibc's default from RLIMIT_STACK, or 2 MiB
  // at least) cannot fit in 256 MiB more than this process has mapped now.
  long mapped_kib = 0;
  if (FILE* status = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof(line), status) != nullptr) {
      if (std::sscanf(line, "VmSize: %ld kB", &mapped_kib) == 1) break;
    }
    std::fclose(status);
  }
  ASSERT_GT(mapped_kib, 0);
  pthread_attr_t attributes;
  size_t stack_bytes = 0;
  pthread_getattr_default_np(&attributes);
  pthread_attr_getstacksize(&attributes, &stack_bytes);
  pthread_attr_destroy(&attributes);
  const int count = 256;
  ASSERT_GE(stack_bytes * count, size_t{512} << 20) << "stacks of " << stack_bytes << " bytes";
  rlimit limited = before;
  limited.rlim_cur = static_cast<rlim_t>(mapped_kib) * 1024 + (rlim_t{256} << 20);
  ASSERT_EQ(setrlimit(RLIMIT_AS, &limited), 0);
  std::atomic<int> ran{0};
  std::string message;
  try {
    RunOnThreads(count, "test threads", [&](int) { ++ran; });
  } catch (const ThreadStartError& error) {
    message = error.what();
  }
  ASSERT_EQ(setrlimit(RLIMIT_AS, &before), 0);
  EXPECT_NE(message.find(" of 256 for test threads: Resource temporarily unavailable"),
            std::string::npos)
      << message;
  EXPECT_EQ(ran.load(), 0);
#endif
}

}  // namespace
}  // namespace infini::parallel
