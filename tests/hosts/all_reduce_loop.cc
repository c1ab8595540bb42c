// all_reduce_loop: every rank all-reduces a small buffer over the world, again
// and again, for --seconds, checking each result: a run that is busy on the
// network when the multi-host tests cut a link. It prints
// "all_reduce_loop: rank R running" after its first correct all_reduce (what a
// test waits for before the cut) and exits 1 with one line on any failure.
#include <gflags/gflags.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/common/flags.h"
#include "infini/parallel/context.h"
#include "infini/parallel/process_group.h"

DEFINE_int32(seconds, 60, "How long to keep all-reducing");
DEFINE_string(ccl_backend, "gloo", "Backend");

namespace {

using infini::ccl::DeviceBuffer;

// One all_reduce of [rank, rank, ...]: each element must become the sum of ranks.
void CheckedAllReduce(infini::parallel::Context& context, infini::parallel::ProcessGroup& world) {
  constexpr size_t kCount = 1024;
  const int rank = context.rank().global_rank();
  const int size = world.size();
  std::vector<float> values(kCount, static_cast<float>(rank));
  DeviceBuffer buffer(context.backend(), kCount * sizeof(float));
  buffer.CopyFromHost(values.data(), kCount * sizeof(float));
  auto tensor = buffer.AsTensor(infini::ccl::dtype::kFloat32, kCount);
  world.AllReduce(tensor, tensor, infini::ccl::ReduceOp::kSum);
  buffer.CopyToHost(values.data(), kCount * sizeof(float));
  const float expected = static_cast<float>(size * (size - 1) / 2);
  for (float value : values) {
    if (value != expected) throw std::runtime_error("all_reduce gave a wrong sum");
  }
}

}  // namespace

int main(int argc, char** argv) {
  infini::flags::Parse(&argc, &argv, "all_reduce_loop [FLAGS]");
  try {
    infini::parallel::ContextOptions options;
    options.backend = FLAGS_ccl_backend;
    auto context = infini::parallel::Context::Create(options);
    auto world = context->NewWorldGroup();
    const int rank = context->rank().global_rank();
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(FLAGS_seconds);
    long iterations = 0;
    while (std::chrono::steady_clock::now() < end) {
      CheckedAllReduce(*context, *world);
      if (++iterations == 1) {
        std::printf("all_reduce_loop: rank %d running\n", rank);
        std::fflush(stdout);
      }
    }
    std::printf("all_reduce_loop: rank %d done after %ld all_reduces\n", rank, iterations);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "all_reduce_loop: %s\n", error.what());
    return 1;
  }
}
