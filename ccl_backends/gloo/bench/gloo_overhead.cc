// bin/gloo_overhead: the cost of the InfiniCCL layers over gloo, measured.
//
// The same CPU all-reduce (float32, sum, in place) runs, in one process and
// one run, (a) through the C++ API and the gloo plugin and (b) through gloo
// called directly (same TCP transport, same ring algorithm, gloo's own sum),
// for message sizes from 8 B to 64 MiB, with 2 and 4 ranks as threads.
// Each rank runs a fixed number of iterations (ranks must agree); the time
// per all-reduce is rank 0's wall time between two thread barriers. On a
// shared machine the timings drift, so each size runs several rounds that
// alternate which path goes first, and the median round counts.
#include <gflags/gflags.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/common/flags.h"

DEFINE_string(world_sizes, "2,4", "comma-separated numbers of ranks (threads)");
DEFINE_uint64(min_bytes, 8, "smallest message, bytes");
DEFINE_uint64(max_bytes, 64ull << 20, "largest message, bytes");
DEFINE_uint64(iteration_bytes, 512ull << 20,
              "iterations per size = clamp(iteration_bytes / size, min_iterations, "
              "max_iterations)");
DEFINE_int32(min_iterations, 5, "fewest timed iterations per size");
DEFINE_int32(max_iterations, 300, "most timed iterations per size");
DEFINE_int32(rounds, 5, "alternating rounds per size; the median round is reported");

namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  int world_size;
  size_t bytes;
  int iterations;
  double plugin_us;
  double direct_us;
};

int IterationsFor(size_t bytes) {
  const uint64_t by_volume = FLAGS_iteration_bytes / std::max<size_t>(bytes, 1);
  return static_cast<int>(
      std::clamp<uint64_t>(by_volume, FLAGS_min_iterations, FLAGS_max_iterations));
}

std::vector<size_t> Sizes() {
  std::vector<size_t> sizes;
  for (size_t bytes = FLAGS_min_bytes; bytes <= FLAGS_max_bytes; bytes *= 8) sizes.push_back(bytes);
  if (sizes.empty() || sizes.back() != FLAGS_max_bytes) sizes.push_back(FLAGS_max_bytes);
  return sizes;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Runs `body(rank)` on `world_size` threads.
template <class Body>
void OnThreads(int world_size, Body body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) threads.emplace_back(body, rank);
  for (std::thread& thread : threads) thread.join();
}

// Times `iterations` calls of `step` after two warm-up calls; every rank
// calls this together. Returns microseconds per call on rank 0.
template <class Step>
double TimeSteps(std::barrier<>& sync, int rank, int iterations, Step step) {
  step();
  sync.arrive_and_wait();
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) step();
  sync.arrive_and_wait();
  const double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  return rank == 0 ? elapsed / iterations : 0.0;
}

std::vector<Row> Measure(int world_size, const std::vector<size_t>& sizes) {
  std::vector<Row> rows;
  for (size_t bytes : sizes) rows.push_back({world_size, bytes, IterationsFor(bytes), 0, 0});

  const auto backend = infini::ccl::Backend::Load("gloo");
  const infini::ccl::UniqueId id = backend->GetUniqueId();
  auto direct_store = std::make_shared<gloo::rendezvous::HashStore>();
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto direct_device = gloo::transport::tcp::CreateDevice(attr);
  std::barrier<> sync(world_size);

  OnThreads(world_size, [&](int rank) {
    infini::ccl::Communicator comm = backend->CommInitRank(world_size, id, rank);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
    context->connectFullMesh(*direct_store, direct_device);

    const size_t max_count = sizes.back() / sizeof(float);
    infini::ccl::DeviceBuffer plugin_buffer(backend, max_count * sizeof(float));
    std::vector<float> direct_buffer(max_count, 1.0f);
    std::vector<float> ones(max_count, 1.0f);
    plugin_buffer.CopyFromHost(ones.data(), ones.size() * sizeof(float));

    for (Row& row : rows) {
      const size_t count = std::max<size_t>(row.bytes / sizeof(float), 1);
      const infini::ccl::FlatTensor tensor =
          plugin_buffer.AsTensor(infini::ccl::dtype::kFloat32, static_cast<int64_t>(count));
      auto plugin_step = [&] { comm.AllReduce(tensor, tensor, infini::ccl::ReduceOp::kSum); };
      auto direct_step = [&] {
        gloo::AllreduceOptions options(context);
        options.setOutput(direct_buffer.data(), count);
        options.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        gloo::allreduce(options);
      };
      std::vector<double> plugin_rounds;
      std::vector<double> direct_rounds;
      for (int round = 0; round < FLAGS_rounds; ++round) {
        if (round % 2 == 0) {
          plugin_rounds.push_back(TimeSteps(sync, rank, row.iterations, plugin_step));
          direct_rounds.push_back(TimeSteps(sync, rank, row.iterations, direct_step));
        } else {
          direct_rounds.push_back(TimeSteps(sync, rank, row.iterations, direct_step));
          plugin_rounds.push_back(TimeSteps(sync, rank, row.iterations, plugin_step));
        }
      }
      if (rank == 0) {
        row.plugin_us = Median(plugin_rounds);
        row.direct_us = Median(direct_rounds);
      }
    }
    // Keep ranks' connections until all are done.
    sync.arrive_and_wait();
  });
  return rows;
}

std::string HumanBytes(size_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1u << 10)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

}  // namespace

int main(int argc, char** argv) {
  infini::flags::Parse(&argc, &argv,
                       "gloo_overhead [--world_sizes=N,...] [--min_bytes=B] [--max_bytes=B]",
                       "CPU all-reduce through the gloo plugin vs gloo called directly.");
  std::vector<int> world_sizes;
  std::string list = FLAGS_world_sizes;
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    if (!item.empty()) world_sizes.push_back(std::stoi(item));
    start = comma + 1;
  }
  const std::vector<size_t> sizes = Sizes();
  std::printf("%-6s %-10s %6s %14s %14s %12s %8s\n", "ranks", "size", "iters", "plugin_us",
              "gloo_us", "diff_us", "diff_%");
  for (int world_size : world_sizes) {
    for (const Row& row : Measure(world_size, sizes)) {
      const double diff = row.plugin_us - row.direct_us;
      std::printf("%-6d %-10s %6d %14.1f %14.1f %12.1f %7.1f%%\n", row.world_size,
                  HumanBytes(row.bytes).c_str(), row.iterations, row.plugin_us, row.direct_us, diff,
                  100.0 * diff / row.direct_us);
      std::fflush(stdout);
    }
  }
  return 0;
}
