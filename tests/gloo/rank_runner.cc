#include "rank_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/memory_bootstrap_store.h"

namespace infini::gloo_test {

const char* LaunchName(Launch launch) {
  switch (launch) {
    case Launch::kThreads:
      return "threads";
    case Launch::kThreadsOverBootstrap:
      return "threads_over_bootstrap";
    default:
      return "processes";
  }
}

const std::shared_ptr<const ccl::Backend>& GlooBackend() {
  static const std::shared_ptr<const ccl::Backend> backend = ccl::Backend::Load("gloo");
  return backend;
}

namespace {

// One rank's life: join, run, and turn an exception into a failure.
void RunOneRank(int world_size, int rank, const ccl::UniqueId& id, const RankBody& body,
                const ccl::CommConfig& config,
                const std::shared_ptr<ccl::BootstrapStore>& bootstrap) {
  try {
    ccl::Communicator comm = GlooBackend()->CommInitRank(world_size, id, rank, config, bootstrap);
    body(comm);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << rank << " of " << world_size << " threw: " << e.what();
  }
}

}  // namespace

void RunThreadRanks(int world_size, const ccl::UniqueId& id, const RankBody& body,
                    const ccl::CommConfig& config,
                    const std::shared_ptr<ccl::BootstrapStore>& bootstrap) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back(RunOneRank, world_size, rank, std::cref(id), std::cref(body),
                         std::cref(config), std::cref(bootstrap));
  }
  for (std::thread& thread : threads) thread.join();
}

namespace {

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

// A child process is this test binary run again with a filter for the
// current test and this variable (a rank: "<rank> <world_size> <unique id
// hex>"; a fresh process: "fresh"): fork alone would leave the child with
// whatever locks the parent's other threads (the bootstrap store's loop)
// held at that moment, which under ASan hangs it.
constexpr char kChildVariable[] = "INFINI_GLOO_TEST_RANK";
constexpr char kFreshProcess[] = "fresh";

// Starts one child per value of kChildVariable and waits for all, expecting
// kRankPassedStatus from each; kills those still running at the deadline.
void RunChildren(const std::vector<std::string>& child_values, int deadline_seconds) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter =
      std::string("--gtest_filter=") + test->test_suite_name() + "." + test->name();
  // Everything exec needs is built before fork: the child may only make
  // async-signal-safe calls until execve.
  std::vector<std::string> inherited;
  for (char** variable = environ; *variable != nullptr; ++variable) {
    if (std::string(*variable).rfind(std::string(kChildVariable) + "=", 0) != 0) {
      inherited.emplace_back(*variable);
    }
  }
  std::vector<std::string> child_variables;
  for (const std::string& value : child_values) {
    child_variables.push_back(std::string(kChildVariable) + "=" + value);
  }
  const std::string self = "/proc/self/exe";
  std::vector<char*> argv = {const_cast<char*>(self.c_str()), const_cast<char*>(filter.c_str()),
                             nullptr};
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> children;
  for (std::string& child_variable : child_variables) {
    std::vector<char*> envp;
    for (std::string& variable : inherited) envp.push_back(variable.data());
    envp.push_back(child_variable.data());
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
    for (size_t index = 0; index < children.size(); ++index) {
      if (done[index]) continue;
      int status = 0;
      if (waitpid(children[index], &status, WNOHANG) == children[index]) {
        done[index] = true;
        --remaining;
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == kRankPassedStatus)
            << "child " << index << " (" << child_values[index] << ") " << DescribeStatus(status);
      }
    }
    if (remaining > 0 && std::chrono::steady_clock::now() > deadline) {
      for (size_t index = 0; index < children.size(); ++index) {
        if (done[index]) continue;
        ADD_FAILURE() << "child " << index << " still running after " << deadline_seconds
                      << " s (hang); killing it";
        kill(children[index], SIGKILL);
        waitpid(children[index], nullptr, 0);
        done[index] = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// In a child process: this process's part, or nullptr in the parent.
const char* ChildPart() { return std::getenv(kChildVariable); }

[[noreturn]] void ExitChild() {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(::testing::Test::HasFailure() ? 1 : kRankPassedStatus);
}

}  // namespace

void RunRanks(Launch launch, int world_size, const RankBody& body, const ccl::CommConfig& config,
              int deadline_seconds) {
  if (const char* part = ChildPart(); part != nullptr && launch == Launch::kProcesses) {
    // This process is one rank of a parent's RunRanks: run it and report
    // through the exit status.
    std::istringstream fields(part);
    int rank = -1;
    int parent_world_size = 0;
    std::string id_hex;
    if (!(fields >> rank >> parent_world_size >> id_hex)) {
      ADD_FAILURE() << kChildVariable << "='" << part << "' is malformed";
    } else {
      RunOneRank(parent_world_size, rank, ccl::UniqueId::FromHex(id_hex), body, config, nullptr);
    }
    ExitChild();
  }
  std::shared_ptr<ccl::BootstrapStore> bootstrap;
  if (launch == Launch::kThreadsOverBootstrap)
    bootstrap = std::make_shared<ccl::MemoryBootstrapStore>();
  const ccl::UniqueId id = GlooBackend()->GetUniqueId(bootstrap);
  if (launch != Launch::kProcesses) {
    RunThreadRanks(world_size, id, body, config, bootstrap);
    return;
  }
  std::vector<std::string> parts;
  for (int rank = 0; rank < world_size; ++rank) {
    parts.push_back(std::to_string(rank) + " " + std::to_string(world_size) + " " + id.ToHex());
  }
  RunChildren(parts, deadline_seconds);
}

void RunInFreshProcess(const std::function<void()>& body, int deadline_seconds) {
  if (const char* part = ChildPart(); part != nullptr && std::string(part) == kFreshProcess) {
    try {
      body();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the fresh process threw: " << e.what();
    }
    ExitChild();
  }
  RunChildren({kFreshProcess}, deadline_seconds);
}

}  // namespace infini::gloo_test
