// A rank for the stack tests (stack_dump_test.cc), waiting in functions with
// names the tests look for in the stacks infini_run reads:
//   --mode=stuck: rank 1 waits forever in HangInsideAllReduceForTest; rank 0
//     prints the flight recorder's "behind: process rank 1" line (as
//     parallel/'s watchdog does) and exits 124, which stops the run.
//   --mode=live: every rank waits in SpinInsideTrainingStepForTest until the
//     file --until exists or --seconds (default 4) passed, then exits 0.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

// Out of line and not folded, so that each is a frame of its own.
__attribute__((noinline)) void HangInsideAllReduceForTest() {
  for (;;) {
    pause();
    asm volatile("");
  }
}

// Its own frame: a capture that stops the rank inside access() may not
// resolve the syscall's immediate caller, and that caller must not be the
// frame the tests look for.
__attribute__((noinline)) bool UntilFileExists(const std::string& until) {
  const bool exists = !until.empty() && access(until.c_str(), F_OK) == 0;
  asm volatile("");
  return exists;
}

__attribute__((noinline)) void SpinInsideTrainingStepForTest(double seconds,
                                                             const std::string& until) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end && !UntilFileExists(until)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    asm volatile("");
  }
}

int main(int argc, char** argv) {
  std::string mode = "live";
  double seconds = 4;
  std::string until;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--mode=", 7) == 0) mode = argv[i] + 7;
    if (std::strncmp(argv[i], "--seconds=", 10) == 0) seconds = std::atof(argv[i] + 10);
    if (std::strncmp(argv[i], "--until=", 8) == 0) until = argv[i] + 8;
  }
  const char* rank_text = getenv("RANK");
  const int rank = rank_text ? std::atoi(rank_text) : 0;
  std::printf("stack_dump_child: rank %d started\n", rank);
  std::fflush(stdout);
  if (mode == "stuck") {
    if (rank == 1) HangInsideAllReduceForTest();
    // Long enough for rank 1 to be inside its hang; bounded by the test.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::fprintf(stderr,
                 "infini_ccl flight recorder: behind: process rank 1 (global rank 1) on group "
                 "'world': no record (stack_dump_child)\n");
    std::fflush(stderr);
    return 124;
  }
  SpinInsideTrainingStepForTest(seconds, until);
  return 0;
}
