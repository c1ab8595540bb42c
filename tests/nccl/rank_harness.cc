#include "rank_harness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace infini::ccl::nccl_test {
namespace {

constexpr char kWorkerVariable[] = "INFINI_NCCL_TEST_WORKER";
constexpr char kUniqueIdVariable[] = "INFINI_NCCL_TEST_UNIQUE_ID";
constexpr char kRanksPerProcessVariable[] = "INFINI_NCCL_TEST_RANKS_PER_PROCESS";
constexpr char kInitModeVariable[] = "INFINI_NCCL_TEST_INIT";

void WaitFor(const RankContext& context, const std::string& what, const Stream& stream) {
  Event done(context.backend);
  done.Record(stream);
  const auto deadline = std::chrono::steady_clock::now() + kCollectiveDeadline;
  while (!done.Query()) {
    if (std::chrono::steady_clock::now() > deadline) {
      // The peer never came: abort, so that nothing of ours stays blocked.
      if (context.comm != nullptr) context.comm->Abort();
      throw std::runtime_error(what + ": not complete after " +
                               std::to_string(kCollectiveDeadline.count()) +
                               " s; communicator aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// Runs `body` on `comm` on the calling thread (its device current); any
// exception becomes a failure, and the communicator is then aborted rather
// than destroyed so that no rank waits for a peer that gave up.
void RunBody(const std::shared_ptr<const Backend>& backend, Communicator& comm,
             const RankBody& body, std::vector<std::string>* failures) {
  const int rank = comm.rank();
  try {
    Stream stream(backend);
    RankContext context{backend, &comm, &stream, rank, comm.world_size(), {}};
    bool threw = false;
    try {
      body(context);
    } catch (const std::exception& error) {
      threw = true;
      context.failures.push_back("rank " + std::to_string(rank) + ": " + error.what());
    }
    *failures = std::move(context.failures);
    if (threw) {
      comm.Abort();
      return;
    }
    stream.Synchronize();
    comm.Destroy();
  } catch (const std::exception& error) {
    failures->push_back("rank " + std::to_string(rank) + ": " + error.what());
    try {
      comm.Abort();
    } catch (const std::exception&) {
      // Already reported the first failure.
    }
  }
}

// One rank on its own thread: sets the device, creates the communicator,
// runs `body`.
void RunRank(const std::shared_ptr<const Backend>& backend, const UniqueId& id, int world_size,
             int rank, int device, const CommConfig& config, const RankBody& body,
             std::vector<std::string>* failures) {
  Communicator comm;
  try {
    backend->SetDevice(device);
    comm = backend->CommInitRank(world_size, id, rank, config);
  } catch (const std::exception& error) {
    failures->push_back("rank " + std::to_string(rank) + ": " + error.what());
    return;
  }
  RunBody(backend, comm, body, failures);
}

// This process's communicators of one group in one call.
std::vector<Communicator> InitTogether(const std::shared_ptr<const Backend>& backend, InitMode mode,
                                       int world_size, const UniqueId& id,
                                       const std::vector<int>& ranks,
                                       const std::vector<int>& devices, const CommConfig& config) {
  if (mode == InitMode::kInitAll) return backend->CommInitAll(devices, config);
  return backend->CommInitRanks(world_size, id, ranks, devices, config);
}

std::string SelfPath() {
  char path[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  return std::string(path, static_cast<size_t>(length));
}

int EnvInt(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) throw std::runtime_error(std::string(name) + " is not set");
  return std::atoi(value);
}

}  // namespace

void RankContext::Wait(const std::string& what) const { WaitFor(*this, what, *stream); }
void RankContext::Wait(const std::string& what, const Stream& other) const {
  WaitFor(*this, what, other);
}

int VisibleDevices() {
  try {
    return Backend::Load("nccl")->DeviceCount();
  } catch (const std::exception& error) {
    std::cerr << "nccl backend unavailable: " << error.what() << "\n";
    return 0;
  }
}

std::string DevicesNeeded(int needed) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return "needs " + std::to_string(needed) + " CUDA devices, found " +
         std::to_string(VisibleDevices()) +
         " (CUDA_VISIBLE_DEVICES=" + (visible == nullptr ? "<unset>" : visible) + ")";
}

std::vector<std::vector<std::string>> DriveCommunicators(
    const std::shared_ptr<const Backend>& backend, std::vector<Communicator> comms,
    const std::vector<int>& devices, const RankBody& body) {
  std::vector<std::vector<std::string>> failures(comms.size());
  std::vector<std::thread> threads;
  for (size_t index = 0; index < comms.size(); ++index) {
    threads.emplace_back([&, index] {
      try {
        backend->SetDevice(devices[index]);
      } catch (const std::exception& error) {
        failures[index].push_back(error.what());
        try {
          comms[index].Abort();
        } catch (const std::exception&) {
          // The failure above is the one to report.
        }
        return;
      }
      RunBody(backend, comms[index], body, &failures[index]);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return failures;
}

std::vector<std::vector<std::string>> RunThreadRanks(int world_size, const RankBody& body,
                                                     const CommConfig& config, InitMode mode) {
  auto backend = Backend::Load("nccl");
  const UniqueId id = backend->GetUniqueId();
  if (mode != InitMode::kPerThread) {
    std::vector<int> ranks(static_cast<size_t>(world_size));
    for (int rank = 0; rank < world_size; ++rank) ranks[static_cast<size_t>(rank)] = rank;
    const std::vector<int> devices = ranks;
    std::vector<Communicator> comms;
    try {
      comms = InitTogether(backend, mode, world_size, id, ranks, devices, config);
    } catch (const std::exception& error) {
      return {{std::string("init: ") + error.what()}};
    }
    return DriveCommunicators(backend, std::move(comms), devices, body);
  }
  std::vector<std::vector<std::string>> failures(static_cast<size_t>(world_size));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world_size; ++rank) {
    ranks.emplace_back(RunRank, backend, id, world_size, rank, rank, config, std::cref(body),
                       &failures[static_cast<size_t>(rank)]);
  }
  for (std::thread& rank : ranks) rank.join();
  return failures;
}

std::vector<std::string> RunProcessRanks(int world_size, const std::string& scenario,
                                         std::chrono::seconds deadline, int ranks_per_process,
                                         InitMode mode) {
  if (ranks_per_process < 1 || world_size % ranks_per_process != 0 ||
      (ranks_per_process > 1 && mode == InitMode::kPerThread) || mode == InitMode::kInitAll) {
    throw std::invalid_argument("RunProcessRanks: " + std::to_string(ranks_per_process) +
                                " ranks per process do not fit this layout");
  }
  const int processes = world_size / ranks_per_process;
  auto backend = Backend::Load("nccl");
  // This process hosts the id's bootstrap root and stays alive meanwhile.
  const std::string id_hex = backend->GetUniqueId().ToHex();
  const std::string self = SelfPath();
  std::vector<pid_t> children;
  for (int rank = 0; rank < processes; ++rank) {
    // Everything the child needs is built before fork: only exec after it.
    std::vector<std::string> variables;
    for (char** entry = environ; *entry != nullptr; ++entry) variables.emplace_back(*entry);
    variables.push_back(std::string(kWorkerVariable) + "=" + scenario);
    variables.push_back(std::string(kUniqueIdVariable) + "=" + id_hex);
    variables.push_back("RANK=" + std::to_string(rank));
    variables.push_back("LOCAL_RANK=" + std::to_string(rank));
    variables.push_back("WORLD_SIZE=" + std::to_string(world_size));
    variables.push_back(std::string(kRanksPerProcessVariable) + "=" +
                        std::to_string(ranks_per_process));
    variables.push_back(std::string(kInitModeVariable) + "=" +
                        (mode == InitMode::kPerThread ? "per_thread" : "init_ranks"));
    std::vector<char*> envp;
    for (std::string& variable : variables) envp.push_back(variable.data());
    envp.push_back(nullptr);
    std::vector<char*> argv = {const_cast<char*>(self.c_str()), nullptr};
    const pid_t child = fork();
    if (child == 0) {
      execve(self.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    if (child < 0) throw std::runtime_error("fork failed");
    children.push_back(child);
  }
  std::vector<std::string> failures;
  const auto give_up = std::chrono::steady_clock::now() + deadline;
  std::vector<bool> reaped(children.size(), false);
  size_t remaining = children.size();
  while (remaining > 0) {
    for (size_t rank = 0; rank < children.size(); ++rank) {
      if (reaped[rank]) continue;
      int status = 0;
      if (waitpid(children[rank], &status, WNOHANG) != children[rank]) continue;
      reaped[rank] = true;
      --remaining;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      failures.push_back("worker process " + std::to_string(rank) +
                         (WIFEXITED(status)
                              ? " exited with " + std::to_string(WEXITSTATUS(status))
                              : " died of signal " + std::to_string(WTERMSIG(status))));
    }
    if (remaining > 0 && std::chrono::steady_clock::now() > give_up) {
      for (size_t rank = 0; rank < children.size(); ++rank) {
        if (reaped[rank]) continue;
        kill(children[rank], SIGKILL);
        waitpid(children[rank], nullptr, 0);
        failures.push_back("worker process " + std::to_string(rank) + " still running after " +
                           std::to_string(deadline.count()) + " s; killed");
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return failures;
}

int RunWorker(const std::function<void(const std::string&, RankContext&)>& run_scenario) {
  std::vector<std::string> failures;
  int process = -1;
  try {
    const std::string scenario = std::getenv(kWorkerVariable);
    process = EnvInt("RANK");  // this process's index; its ranks follow
    const int world_size = EnvInt("WORLD_SIZE");
    const int first_device = EnvInt("LOCAL_RANK");
    const int ranks_per_process = EnvInt(kRanksPerProcessVariable);
    const bool per_thread = std::string(std::getenv(kInitModeVariable)) == "per_thread";
    const UniqueId id = UniqueId::FromHex(std::getenv(kUniqueIdVariable));
    auto backend = Backend::Load("nccl");
    const RankBody body = [&](RankContext& context) { run_scenario(scenario, context); };
    if (per_thread) {
      RunRank(backend, id, world_size, process, first_device, {}, body, &failures);
    } else {
      std::vector<int> ranks, devices;
      for (int index = 0; index < ranks_per_process; ++index) {
        ranks.push_back(process * ranks_per_process + index);
        devices.push_back(first_device * ranks_per_process + index);
      }
      std::vector<Communicator> comms =
          InitTogether(backend, InitMode::kInitRanks, world_size, id, ranks, devices, {});
      for (auto& each : DriveCommunicators(backend, std::move(comms), devices, body)) {
        failures.insert(failures.end(), each.begin(), each.end());
      }
    }
  } catch (const std::exception& error) {
    failures.push_back("worker process " + std::to_string(process) + ": " + error.what());
  }
  for (const std::string& failure : failures) std::cerr << "[worker] " << failure << "\n";
  return failures.empty() ? 0 : 1;
}

std::string Describe(const std::vector<std::string>& failures, size_t limit) {
  std::string text;
  for (size_t index = 0; index < failures.size() && index < limit; ++index) {
    text += failures[index] + "\n";
  }
  if (failures.size() > limit) {
    text += "... and " + std::to_string(failures.size() - limit) + " more\n";
  }
  return text;
}

}  // namespace infini::ccl::nccl_test
