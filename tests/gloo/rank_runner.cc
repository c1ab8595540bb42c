#include "rank_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
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

// A rank process is this test binary run again with a filter for the current
// test and this variable ("<rank> <world_size> <unique id hex>"): fork alone
// would leave the child with whatever locks the parent's other threads (the
// bootstrap store's loop) held at that moment, which under ASan hangs it.
constexpr char kRankVariable[] = "INFINI_GLOO_TEST_RANK";

void RunAsProcesses(int world_size, const ccl::UniqueId& id, int deadline_seconds) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter =
      std::string("--gtest_filter=") + test->test_suite_name() + "." + test->name();
  // Everything exec needs is built before fork: the child may only make
  // async-signal-safe calls until execve.
  std::vector<std::string> inherited;
  for (char** variable = environ; *variable != nullptr; ++variable) {
    if (std::string(*variable).rfind(std::string(kRankVariable) + "=", 0) != 0) {
      inherited.emplace_back(*variable);
    }
  }
  std::vector<std::string> rank_variables;
  for (int rank = 0; rank < world_size; ++rank) {
    rank_variables.push_back(std::string(kRankVariable) + "=" + std::to_string(rank) + " " +
                             std::to_string(world_size) + " " + id.ToHex());
  }
  const std::string self = "/proc/self/exe";
  std::vector<char*> argv = {const_cast<char*>(self.c_str()), const_cast<char*>(filter.c_str()),
                             nullptr};
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> children;
  for (int rank = 0; rank < world_size; ++rank) {
    std::vector<char*> envp;
    for (std::string& variable : inherited) envp.push_back(variable.data());
    envp.push_back(rank_variables[rank].data());
    envp.push_back(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      execve(self.c_str(), argv.data(), envp.data());
      _exit(127);
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
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == kRankPassedStatus)
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
  if (const char* rank_spec = std::getenv(kRankVariable);
      rank_spec != nullptr && launch == Launch::kProcesses) {
    // This process is one rank of a parent's RunRanks: run it and report
    // through the exit status, as a rank process does.
    int rank = -1;
    int parent_world_size = 0;
    char id_hex[2 * INFINI_CCL_UNIQUE_ID_BYTES + 1] = {};
    if (std::sscanf(rank_spec, "%d %d %256s", &rank, &parent_world_size, id_hex) != 3) {
      ADD_FAILURE() << kRankVariable << "='" << rank_spec << "' is malformed";
    } else {
      RunOneRank(parent_world_size, rank, ccl::UniqueId::FromHex(id_hex), body, config);
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(::testing::Test::HasFailure() ? 1 : kRankPassedStatus);
  }
  const ccl::UniqueId id = GlooBackend()->GetUniqueId();
  if (launch == Launch::kThreads) {
    RunAsThreads(world_size, id, body, config);
  } else {
    RunAsProcesses(world_size, id, deadline_seconds);
  }
}

}  // namespace infini::gloo_test
