// How long a staged all_reduce keeps its caller when a peer comes late:
// --calls all_reduces (sum) of device tensors through a world group, each
// on its own buffer, issued back to back; rank --late_rank sleeps
// --late_ms before issuing them. Prints, per rank,
//   deferred_call: rank R issued N calls in X ms, done after Y ms, sums right
// (or "sums wrong"); exit 0 when every sum is right.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/parallel/context.h"
#include "infini/parallel/process_group.h"
#include "infini/parallel/work.h"

namespace {

namespace ccl = infini::ccl;
namespace parallel = infini::parallel;
using Clock = std::chrono::steady_clock;

int FlagValue(int argc, char** argv, const char* name, int fallback) {
  const size_t length = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], name, length) == 0 && argv[i][length] == '=') {
      return std::atoi(argv[i] + length + 1);
    }
  }
  return fallback;
}

// Rank r's element i of call c: r + c + i % 7, so a sum tells the calls apart.
float Input(int rank, int call, int64_t i) { return static_cast<float>(rank + call + i % 7); }

int64_t MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = FlagValue(argc, argv, "--calls", 1);
  const int late_rank = FlagValue(argc, argv, "--late_rank", -1);
  const int late_ms = FlagValue(argc, argv, "--late_ms", 0);
  const bool free_after_issue = FlagValue(argc, argv, "--free_after_issue", 0) == 1;
  const int64_t kCount = FlagValue(argc, argv, "--count", 4099);
  try {
    auto context = parallel::Context::Create();
    auto world = context->NewWorldGroup();
    const int rank = context->rank().global_rank(), size = context->rank().world_size();
    const auto& backend = context->backend();
    std::vector<std::unique_ptr<ccl::DeviceBuffer>> buffers;
    for (int call = 0; call < calls; ++call) {
      std::vector<float> inputs(kCount);
      for (int64_t i = 0; i < kCount; ++i) inputs[static_cast<size_t>(i)] = Input(rank, call, i);
      buffers.push_back(std::make_unique<ccl::DeviceBuffer>(backend, kCount * sizeof(float)));
      buffers.back()->CopyFromHost(inputs.data(), inputs.size() * sizeof(float));
    }
    if (rank == late_rank) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
    const Clock::time_point start = Clock::now();
    std::vector<std::shared_ptr<parallel::Work>> works;
    for (int call = 0; call < calls; ++call) {
      const ccl::FlatTensor tensor =
          buffers[static_cast<size_t>(call)]->AsTensor(ccl::dtype::kFloat32, kCount);
      works.push_back(world->AllReduceAsync(tensor, tensor, ccl::ReduceOp::kSum));
    }
    const int64_t issued_ms = MillisecondsSince(start);
    if (free_after_issue) {
      // Made and freed while the calls are in flight.
      ccl::DeviceBuffer spare(backend, 4096);
    }
    for (const auto& work : works) work->Wait();
    bool right = true;
    for (int call = 0; call < calls; ++call) {
      std::vector<float> values(kCount);
      buffers[static_cast<size_t>(call)]->CopyToHost(values.data(), values.size() * sizeof(float));
      for (int64_t i = 0; i < kCount; ++i) {
        float expected = 0;
        for (int r = 0; r < size; ++r) expected += Input(r, call, i);
        right = right && values[static_cast<size_t>(i)] == expected;
      }
    }
    std::printf("deferred_call: rank %d issued %d calls in %lld ms, done after %lld ms, sums %s\n",
                rank, calls, static_cast<long long>(issued_ms),
                static_cast<long long>(MillisecondsSince(start)), right ? "right" : "wrong");
    return right ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "deferred_call: %s\n", error.what());
    return 1;
  }
}
