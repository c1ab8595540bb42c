// Runs one body per rank in either layout the nccl backend must support:
// 1 process x N threads, or N processes x 1 thread (the test binary re-runs
// itself as workers). Failures are collected per rank, never thrown across
// ranks, and every wait has a deadline after which the rank aborts its
// communicator, so a broken collective fails the test instead of hanging it.
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

// Visible CUDA devices through the nccl plugin (0 when it cannot load).
int VisibleDevices();
// "needs N CUDA devices, found M (CUDA_VISIBLE_DEVICES=...)".
std::string DevicesNeeded(int needed);

// One thread per rank, rank r on device r. Returns each rank's failures
// (exceptions included).
std::vector<std::vector<std::string>> RunThreadRanks(int world_size, const RankBody& body,
                                                     const CommConfig& config = {});

// One process per rank: re-executes this binary with INFINI_NCCL_TEST_WORKER
// = `scenario` and the rank variables; returns one line per failed rank
// (exit status), empty when all passed. Worker output goes to stderr.
std::vector<std::string> RunProcessRanks(int world_size, const std::string& scenario,
                                         std::chrono::seconds deadline);

// The worker side: called from main() when INFINI_NCCL_TEST_WORKER is set.
// `run_scenario` runs a named scenario on the context; returns the exit code.
int RunWorker(const std::function<void(const std::string&, RankContext&)>& run_scenario);

// Joins failures into one message (first `limit` of them).
std::string Describe(const std::vector<std::string>& failures, size_t limit = 20);

}  // namespace infini::ccl::nccl_test
