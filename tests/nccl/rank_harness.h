// Runs one body per rank in the layouts the nccl backend must support:
// 1 process x N threads, N processes x 1 thread, and N processes x K ranks
// (the test binary re-runs itself as workers); communicators made one per
// thread (CommInitRank) or several per call (CommInitRanks, CommInitAll). Failures are collected
// per rank, never thrown across ranks, and every wait has a deadline after which the rank aborts
// its communicator, so a broken collective fails the test instead of hanging it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::ccl::nccl_test {

// Deadline for any one collective to complete; generous, as a hang bound.
inline constexpr std::chrono::seconds kCollectiveDeadline{90};

struct RankContext {
  std::shared_ptr<const Backend> backend;
  Communicator* comm = nullptr;
  Stream* stream = nullptr;
  int rank = 0;
  int world_size = 0;
  std::vector<std::string> failures;

  void Expect(bool condition, const std::string& what) {
    if (!condition) failures.push_back("rank " + std::to_string(rank) + ": " + what);
  }
  // Waits for the work enqueued on `stream` (default: this rank's stream);
  // past the deadline, aborts the communicator and throws.
  void Wait(const std::string& what) const;
  void Wait(const std::string& what, const Stream& other) const;
};

using RankBody = std::function<void(RankContext&)>;

// How a process makes its communicators.
enum class InitMode {
  kPerThread,  // each rank's thread calls CommInitRank on its device
  kInitRanks,  // one CommInitRanks call for all of the process's ranks
  kInitAll,    // CommInitAll: every rank of the group in this process
};

// Visible CUDA devices through the nccl plugin (0 when it cannot load).
int VisibleDevices();
// "needs N CUDA devices, found M (CUDA_VISIBLE_DEVICES=...)".
std::string DevicesNeeded(int needed);

// One thread per rank, rank r on device r, in one process. Returns each
// rank's failures (exceptions included).
std::vector<std::vector<std::string>> RunThreadRanks(int world_size, const RankBody& body,
                                                     const CommConfig& config = {},
                                                     InitMode mode = InitMode::kPerThread);

// Runs `body` once per communicator of `comms` (made by the caller, rank
// comms[i].rank() on devices[i]), each on its own thread, then destroys them
// (aborts them after a failure). Returns failures per communicator.
std::vector<std::vector<std::string>> DriveCommunicators(
    const std::shared_ptr<const Backend>& backend, std::vector<Communicator> comms,
    const std::vector<int>& devices, const RankBody& body);

// world_size / ranks_per_process processes: re-executes this binary with
// INFINI_NCCL_TEST_WORKER = `scenario` and the rank variables; process p
// holds ranks p*K .. p*K+K-1 on its devices p*K .. (made with `mode`:
// kPerThread only when K = 1). Returns one line per failed process (exit
// status), empty when all passed. Worker output goes to stderr.
std::vector<std::string> RunProcessRanks(int world_size, const std::string& scenario,
                                         std::chrono::seconds deadline, int ranks_per_process = 1,
                                         InitMode mode = InitMode::kPerThread);

// The worker side: called from main() when INFINI_NCCL_TEST_WORKER is set.
// `run_scenario` runs a named scenario on the context; returns the exit code.
int RunWorker(const std::function<void(const std::string&, RankContext&)>& run_scenario);

// Joins failures into one message (first `limit` of them).
std::string Describe(const std::vector<std::string>& failures, size_t limit = 20);

}  // namespace infini::ccl::nccl_test
