#include "rank_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace infini::gloo_test {

const char* LaunchName(Launch launch) {
  return launch == Launch::kThreads ? "threads" : "processes";
}

const std::shared_ptr<const ccl::Backend>& GlooBackend() {
  static const std::shared_ptr<const ccl::Backend> backend = ccl::Backend::Load("gloo");
  return backend;
}

namespace {

// One rank's life: join, run, and turn an exception into a failure.
void RunOneRank(int world_size, int rank, const ccl::UniqueId& id, const RankBody& body,
                const ccl::CommConfig& config) {
  try {
    ccl::Communicator comm = GlooBackend()->CommInitRank(world_size, id, rank, config);
    body(comm);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << rank << " of " << world_size << " threw: " << e.what();
  }
}

void RunAsThreads(int world_size, const ccl::UniqueId& id, const RankBody& body,
                  const ccl::CommConfig& config) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back(RunOneRank, world_size, rank, std::cref(id), std::cref(body),
                         std::cref(config));
  }
  for (std::thread& thread : threads) thread.join();
}

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

void RunAsProcesses(int world_size, const ccl::UniqueId& id, const RankBody& body,
                    const ccl::CommConfig& config, int deadline_seconds) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> children;
  for (int rank = 0; rank < world_size; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      // The child reports through its exit status; gtest prints its failures.
      RunOneRank(world_size, rank, id, body, config);
      const int status = ::testing::Test::HasFailure() ? 1 : 0;
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(status);
    }
    children.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_seconds);
  std::vector<bool> done(children.size(), false);
  size_t remaining = children.size();
  while (remaining > 0) {
    for (size_t rank = 0; rank < children.size(); ++rank) {
      if (done[rank]) continue;
      int status = 0;
      if (waitpid(children[rank], &status, WNOHANG) == children[rank]) {
        done[rank] = true;
        --remaining;
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << "rank " << rank << " of " << world_size << " " << DescribeStatus(status);
      }
    }
    if (remaining > 0 && std::chrono::steady_clock::now() > deadline) {
      for (size_t rank = 0; rank < children.size(); ++rank) {
        if (done[rank]) continue;
        ADD_FAILURE() << "rank " << rank << " of " << world_size << " still running after "
                      << deadline_seconds << " s (hang); killing it";
        kill(children[rank], SIGKILL);
        waitpid(children[rank], nullptr, 0);
        done[rank] = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

void RunRanks(Launch launch, int world_size, const RankBody& body, const ccl::CommConfig& config,
              int deadline_seconds) {
  const ccl::UniqueId id = GlooBackend()->GetUniqueId();
  if (launch == Launch::kThreads) {
    RunAsThreads(world_size, id, body, config);
  } else {
    RunAsProcesses(world_size, id, body, config, deadline_seconds);
  }
}

}  // namespace infini::gloo_test
