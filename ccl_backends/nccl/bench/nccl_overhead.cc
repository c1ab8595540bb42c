// bin/nccl_overhead_bench: what the InfiniCCL layer costs over calling NCCL
// directly, measured side by side in one run.
//
//   nccl_overhead_bench                       # 1 process, 1 thread per GPU
//   infini_run --nproc_per_node=2 -- nccl_overhead_bench   # 1 process per GPU
//
// For all_reduce, all_gather, reduce_scatter and broadcast at --min_bytes ..
// --max_bytes (x --step_factor): time per call from CUDA events over a fixed
// number of iterations, and nccl-tests' bus bandwidth, through ncclAllReduce
// etc. and through the plugin (C++ API) on the same stream and buffers. Then
// eager vs CUDA-graph-replayed all_reduce latency at small sizes, and the
// host time per call (enqueue only) at 8 B over --host_calls calls.
//
// The only place besides the plugin that includes nccl.h: the baseline.
#include <cuda_runtime_api.h>
#include <gflags/gflags.h>
#include <nccl.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../src/communicator.h"  // the plugin's communicator, to call NCCL on the same one
#include "infini/ccl/bus_bandwidth.h"
#include "infini/ccl/ccl.h"
#include "infini/ccl/plugin_table.h"
#include "infini/common/flags.h"
#include "infini/common/launch_env.h"
#include "infini/rendezvous/run_token.h"
#include "infini/rendezvous/tcp_store.h"

DEFINE_uint64(min_bytes, 8, "Smallest message size in bytes");
DEFINE_uint64(max_bytes, uint64_t{1} << 30, "Largest message size in bytes (always measured)");
DEFINE_uint64(step_factor, 4, "Each size is the previous times this");
DEFINE_int32(warmup_iters, 5, "Untimed iterations before each timed loop");
DEFINE_int32(iters, 20, "Timed iterations per size");
DEFINE_int32(large_iters, 5, "Timed iterations for sizes >= --large_bytes");
DEFINE_uint64(large_bytes, uint64_t{256} << 20, "Sizes from here on use --large_iters");
DEFINE_string(collectives, "all_reduce,all_gather,reduce_scatter,broadcast",
              "Comma-separated subset of all_reduce, all_gather, reduce_scatter, broadcast");
DEFINE_uint64(graph_max_bytes, 64 << 10, "Eager vs graph latency from --min_bytes to this");
DEFINE_int32(graph_ops, 50, "All-reduces captured into one graph");
DEFINE_int32(host_calls, 10000, "Calls timed on the host for the dispatch overhead (at 8 B)");
DEFINE_int32(host_batch, 100, "Calls enqueued between stream synchronizations");
DEFINE_int32(host_rounds, 9,
             "Rounds of the host-time measurement: the paths alternate, medians are reported");
DEFINE_int32(threads, 0, "Thread layout: ranks (one per GPU); 0 = every visible GPU");

namespace infini::ccl::nccl_bench {
namespace {

using Clock = std::chrono::steady_clock;

void CudaCheck(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(error));
  }
}
void NcclCheck(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) {
    throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(result));
  }
}

// The collectives compared, in this order; names and count rules are ccl's
// (infini/ccl/collectives.h).
constexpr Collective kCompared[] = {Collective::kAllReduce, Collective::kAllGather,
                                    Collective::kReduceScatter, Collective::kBroadcast};

std::vector<size_t> Sizes(size_t min_bytes, size_t max_bytes) {
  std::vector<size_t> sizes;
  for (size_t bytes = std::max<size_t>(min_bytes, 1); bytes <= max_bytes;
       bytes *= std::max<uint64_t>(FLAGS_step_factor, 2)) {
    sizes.push_back(bytes);
  }
  if (sizes.empty() || sizes.back() != max_bytes) sizes.push_back(max_bytes);
  return sizes;
}

std::string SizeText(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit < 3 && static_cast<size_t>(value) % 1024 == 0) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f %s", value, units[unit]);
  return text;
}

// What one rank owns: a direct NCCL communicator and a plugin communicator
// on the same device, sharing one stream and one pair of buffers.
struct Rank {
  int rank = 0;
  int world = 1;
  int device = 0;
  std::shared_ptr<const Backend> backend;
  ncclComm_t direct = nullptr;
  Communicator plugin_comm;
  std::optional<Stream> plugin_stream;
  cudaStream_t stream = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  std::function<void()> sync_ranks;  // host barrier across ranks (threads layout)
};

constexpr DLDataType kFloat32{kDLFloat, 32, 1};

// Element counts (float32) of one call of `collective` at `bytes`, as
// nccl-tests sizes them: the size of all_gather and reduce_scatter is the
// full buffer, and their count one rank's share of it.
size_t CallCount(Collective collective, size_t bytes, int world) {
  const size_t elements = bytes / sizeof(float);
  const CountRule rule = CountRuleOf(collective);
  const bool per_rank = rule == CountRule::kPerRankSend || rule == CountRule::kPerRankRecv;
  return per_rank ? elements / static_cast<size_t>(world) : elements;
}

void Direct(const Rank& r, Collective collective, size_t count) {
  switch (collective) {
    case Collective::kAllReduce:
      NcclCheck(ncclAllReduce(r.send, r.recv, count, ncclFloat32, ncclSum, r.direct, r.stream),
                "ncclAllReduce");
      break;
    case Collective::kAllGather:
      NcclCheck(ncclAllGather(r.send, r.recv, count, ncclFloat32, r.direct, r.stream),
                "ncclAllGather");
      break;
    case Collective::kReduceScatter:
      NcclCheck(ncclReduceScatter(r.send, r.recv, count, ncclFloat32, ncclSum, r.direct, r.stream),
                "ncclReduceScatter");
      break;
    case Collective::kBroadcast:
      NcclCheck(ncclBroadcast(r.send, r.recv, count, ncclFloat32, 0, r.direct, r.stream),
                "ncclBroadcast");
      break;
    default:
      throw std::logic_error("nccl_overhead_bench has no direct call for " +
                             std::string(CollectiveName(collective)));
  }
}

// Tensors are built once per size, as a framework holds its tensors; the
// call is what a training step makes.
struct PluginCall {
  FlatTensor send;
  FlatTensor recv;
};

PluginCall MakePluginCall(const Rank& r, Collective collective, size_t count) {
  const DLDevice device{kDLCUDA, r.device};
  const auto n = static_cast<int64_t>(count);
  const auto world = static_cast<int64_t>(r.world);
  switch (collective) {
    case Collective::kAllGather:
      return {FlatTensor(r.send, kFloat32, n, device),
              FlatTensor(r.recv, kFloat32, n * world, device)};
    case Collective::kReduceScatter:
      return {FlatTensor(r.send, kFloat32, n * world, device),
              FlatTensor(r.recv, kFloat32, n, device)};
    default:
      return {FlatTensor(r.send, kFloat32, n, device), FlatTensor(r.recv, kFloat32, n, device)};
  }
}

void Plugin(const Rank& r, Collective collective, const PluginCall& call) {
  const Communicator& comm = r.plugin_comm;
  switch (collective) {
    case Collective::kAllReduce:
      comm.AllReduce(call.send, call.recv, ReduceOp::kSum, *r.plugin_stream);
      break;
    case Collective::kAllGather:
      comm.AllGather(call.send, call.recv, *r.plugin_stream);
      break;
    case Collective::kReduceScatter:
      comm.ReduceScatter(call.send, call.recv, ReduceOp::kSum, *r.plugin_stream);
      break;
    case Collective::kBroadcast:
      comm.Broadcast(call.send, call.recv, 0, *r.plugin_stream);
      break;
    default:
      throw std::logic_error("nccl_overhead_bench has no plugin call for " +
                             std::string(CollectiveName(collective)));
  }
}

// Microseconds per call of `op`, from CUDA events around `iters` calls.
template <typename Op>
double TimePerCall(Rank& r, int warmup, int iters, Op&& op) {
  for (int i = 0; i < warmup; ++i) op();
  CudaCheck(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
  r.sync_ranks();
  CudaCheck(cudaEventRecord(r.start, r.stream), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) op();
  CudaCheck(cudaEventRecord(r.stop, r.stream), "cudaEventRecord");
  CudaCheck(cudaEventSynchronize(r.stop), "cudaEventSynchronize");
  float ms = 0;
  CudaCheck(cudaEventElapsedTime(&ms, r.start, r.stop), "cudaEventElapsedTime");
  return 1000.0 * ms / iters;
}

// Nanoseconds of host time per call of `op` (enqueue only): batches small
// enough that the launch queue never fills, synchronized between batches.
template <typename Op>
double HostNsPerCall(Rank& r, Op&& op) {
  const int batch = std::max(1, FLAGS_host_batch);
  for (int i = 0; i < batch; ++i) op();  // warm-up
  CudaCheck(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
  r.sync_ranks();
  std::chrono::nanoseconds total{0};
  int calls = 0;
  while (calls < FLAGS_host_calls) {
    const auto started = Clock::now();
    for (int i = 0; i < batch; ++i) op();
    total += Clock::now() - started;
    calls += batch;
    CudaCheck(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
  }
  return static_cast<double>(total.count()) / calls;
}

void PrintRow(bool leader, const char* format, ...) __attribute__((format(printf, 2, 3)));
void PrintRow(bool leader, const char* format, ...) {
  if (!leader) return;
  va_list arguments;
  va_start(arguments, format);
  std::vprintf(format, arguments);
  va_end(arguments);
  std::fflush(stdout);
}

bool Selected(std::string_view name) {
  std::stringstream list(FLAGS_collectives);
  for (std::string item; std::getline(list, item, ',');) {
    if (item == name) return true;
  }
  return false;
}

void BandwidthTable(Rank& r) {
  const bool leader = r.rank == 0;
  PrintRow(leader,
           "\n## Collectives: direct NCCL vs InfiniCCL plugin (float32, sum, out-of-place)\n");
  PrintRow(leader, "%-15s %10s %12s %14s %12s %14s %10s\n", "collective", "size", "direct_us",
           "direct_busbw", "infini_us", "infini_busbw", "delta_us");
  for (Collective collective : kCompared) {
    const std::string name(CollectiveName(collective));
    if (!Selected(name)) continue;
    for (size_t bytes : Sizes(FLAGS_min_bytes, FLAGS_max_bytes)) {
      const size_t count = CallCount(collective, bytes, r.world);
      if (count == 0) continue;  // smaller than one element per rank
      const bool large = bytes >= FLAGS_large_bytes;
      const int iters = large ? FLAGS_large_iters : FLAGS_iters;
      const int warmup = large ? std::min(FLAGS_warmup_iters, 2) : FLAGS_warmup_iters;
      const PluginCall call = MakePluginCall(r, collective, count);
      const double direct_us = TimePerCall(r, warmup, iters, [&] { Direct(r, collective, count); });
      const double plugin_us = TimePerCall(r, warmup, iters, [&] { Plugin(r, collective, call); });
      const double factor = BusBandwidthFactor(collective, r.world);
      const double direct_busbw = bytes / (direct_us * 1e3) * factor;  // GB/s
      const double plugin_busbw = bytes / (plugin_us * 1e3) * factor;
      PrintRow(leader, "%-15s %10s %12.2f %14.2f %12.2f %14.2f %+10.2f\n", name.c_str(),
               SizeText(bytes).c_str(), direct_us, direct_busbw, plugin_us, plugin_busbw,
               plugin_us - direct_us);
    }
  }
}

void GraphTable(Rank& r) {
  const bool leader = r.rank == 0;
  const auto& plugin = PluginTable(*r.backend);
  PrintRow(leader,
           "\n## all_reduce latency: eager vs CUDA-graph replay (float32 sum, %d ops per graph)\n",
           FLAGS_graph_ops);
  PrintRow(leader, "%10s %16s %16s %16s\n", "size", "direct_eager_us", "infini_eager_us",
           "infini_graph_us");
  for (size_t bytes : Sizes(FLAGS_min_bytes, FLAGS_graph_max_bytes)) {
    const size_t count = bytes / sizeof(float);
    if (count == 0) continue;
    const PluginCall call = MakePluginCall(r, Collective::kAllReduce, count);
    const int ops = std::max(1, FLAGS_graph_ops);
    const double direct_us =
        TimePerCall(r, FLAGS_warmup_iters, ops, [&] { Direct(r, Collective::kAllReduce, count); });
    const double eager_us =
        TimePerCall(r, FLAGS_warmup_iters, ops, [&] { Plugin(r, Collective::kAllReduce, call); });
    infiniCclStream_t stream = r.plugin_stream->handle();
    r.backend->Check(plugin.stream_begin_capture(stream), "stream_begin_capture");
    for (int i = 0; i < ops; ++i) Plugin(r, Collective::kAllReduce, call);
    infiniCclGraph_t graph = nullptr;
    r.backend->Check(plugin.stream_end_capture(stream, &graph), "stream_end_capture");
    const int launches = 5;
    const double per_launch_us = TimePerCall(r, 1, launches, [&] {
      r.backend->Check(plugin.graph_launch(graph, stream), "graph_launch");
    });
    r.backend->Check(plugin.graph_destroy(graph), "graph_destroy");
    PrintRow(leader, "%10s %16.2f %16.2f %16.2f\n", SizeText(bytes).c_str(), direct_us, eager_us,
             per_launch_us / ops);
  }
}

void HostOverheadTable(Rank& r) {
  const bool leader = r.rank == 0;
  const auto& plugin = PluginTable(*r.backend);
  const size_t count = 2;  // 8 B of float32
  const PluginCall call = MakePluginCall(r, Collective::kAllReduce, count);
  infiniCclComm_t comm = r.plugin_comm.handle();
  infiniCclStream_t stream = r.plugin_stream->handle();
  // The same ncclComm_t the plugin calls: two communicators can differ in
  // host cost by far more than the layer does, so the fair baseline for the
  // dispatch overhead is NCCL called directly on the plugin's own one.
  ncclComm_t plugin_nccl = comm->nccl;
  // One sample per path per round; the first path of a round rotates, so that
  // drift and warm-up favour none, and the median of each path is reported.
  constexpr int kPaths = 4;
  std::vector<double> samples[kPaths];
  for (int round = 0; round < std::max(1, FLAGS_host_rounds); ++round) {
    for (int slot = 0; slot < kPaths; ++slot) {
      const int path = (round + slot) % kPaths;
      double ns = 0;
      switch (path) {
        case 0:
          ns = HostNsPerCall(r, [&] { Direct(r, Collective::kAllReduce, count); });
          break;
        case 1:
          ns = HostNsPerCall(r, [&] {
            NcclCheck(
                ncclAllReduce(r.send, r.recv, count, ncclFloat32, ncclSum, plugin_nccl, r.stream),
                "ncclAllReduce");
          });
          break;
        case 2:
          ns = HostNsPerCall(r, [&] {
            r.backend->Check(
                plugin.all_reduce(r.send, r.recv, count, kFloat32, infiniCclSum, comm, stream),
                "all_reduce");
          });
          break;
        default:
          ns = HostNsPerCall(r, [&] { Plugin(r, Collective::kAllReduce, call); });
          break;
      }
      samples[path].push_back(ns);
    }
  }
  const auto median = [](std::vector<double> values) {
    std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
    return values[values.size() / 2];
  };
  const double own_comm_ns = median(samples[0]);
  const double direct_ns = median(samples[1]);
  const double abi_ns = median(samples[2]);
  const double api_ns = median(samples[3]);
  PrintRow(leader,
           "\n## Host time per all_reduce call at 8 B (enqueue only; median of %d rounds of %d "
           "calls in batches of %d)\n",
           std::max(1, FLAGS_host_rounds), FLAGS_host_calls, FLAGS_host_batch);
  PrintRow(leader, "%-28s %12s %12s\n", "path", "ns_per_call", "delta_ns");
  PrintRow(leader, "%-28s %12.0f %12s\n", "direct, own communicator", own_comm_ns, "");
  PrintRow(leader, "%-28s %12.0f %12s\n", "direct, plugin's communicator", direct_ns, "-");
  PrintRow(leader, "%-28s %12.0f %+12.0f\n", "plugin ABI (all_reduce)", abi_ns, abi_ns - direct_ns);
  PrintRow(leader, "%-28s %12.0f %+12.0f\n", "C++ API (comm.AllReduce)", api_ns,
           api_ns - direct_ns);
}

// Sets up one rank (device, both communicators, stream, buffers), runs every
// table, tears down.
void RunRank(Rank& r, const ncclUniqueId& direct_id, const UniqueId& plugin_id) {
  r.backend->SetDevice(r.device);
  NcclCheck(ncclCommInitRank(&r.direct, r.world, direct_id, r.rank), "ncclCommInitRank");
  r.plugin_comm = r.backend->CommInitRank(r.world, plugin_id, r.rank);
  r.plugin_stream.emplace(r.backend);
  r.stream = reinterpret_cast<cudaStream_t>(r.plugin_stream->handle());
  const size_t bytes = std::max<size_t>(FLAGS_max_bytes, FLAGS_graph_max_bytes);
  CudaCheck(cudaMalloc(&r.send, bytes), "cudaMalloc");
  CudaCheck(cudaMalloc(&r.recv, bytes), "cudaMalloc");
  CudaCheck(cudaMemset(r.send, 0, bytes), "cudaMemset");
  CudaCheck(cudaEventCreate(&r.start), "cudaEventCreate");
  CudaCheck(cudaEventCreate(&r.stop), "cudaEventCreate");

  BandwidthTable(r);
  GraphTable(r);
  HostOverheadTable(r);

  CudaCheck(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
  cudaEventDestroy(r.start);
  cudaEventDestroy(r.stop);
  cudaFree(r.send);
  cudaFree(r.recv);
  r.plugin_comm.Destroy();
  ncclCommDestroy(r.direct);
}

std::string VersionLine(const Backend& backend, int world, const char* layout) {
  return "# nccl_overhead_bench: " + std::to_string(world) + " ranks (" + layout + "), plugin " +
         backend.info().version + " from " + backend.info().library_path;
}

int RunThreads(const std::shared_ptr<const Backend>& backend) {
  if (backend->DeviceCount() == 0) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    std::fprintf(stderr,
                 "nccl_overhead_bench: no CUDA device is visible (CUDA_VISIBLE_DEVICES=%s); it "
                 "needs at least one GPU per rank\n",
                 visible == nullptr ? "<unset>" : visible);
    return 2;
  }
  const int world = FLAGS_threads > 0 ? FLAGS_threads : backend->DeviceCount();
  if (world < 1 || world > backend->DeviceCount()) {
    std::fprintf(stderr, "--threads=%d: expected 1..%d (visible CUDA devices)\n", world,
                 backend->DeviceCount());
    return 2;
  }
  std::printf("%s\n", VersionLine(*backend, world, "1 process x threads").c_str());
  ncclUniqueId direct_id;
  NcclCheck(ncclGetUniqueId(&direct_id), "ncclGetUniqueId");
  const UniqueId plugin_id = backend->GetUniqueId();
  std::barrier sync(world);
  std::vector<Rank> ranks(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    Rank& r = ranks[static_cast<size_t>(rank)];
    r.rank = rank;
    r.world = world;
    r.device = rank;
    r.backend = backend;
    r.sync_ranks = [&sync] { sync.arrive_and_wait(); };
    threads.emplace_back([&, rank] {
      try {
        RunRank(ranks[static_cast<size_t>(rank)], direct_id, plugin_id);
      } catch (const std::exception& error) {
        errors[static_cast<size_t>(rank)] = error.what();
        std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
        std::_Exit(1);  // the other ranks would wait for this one forever
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return 0;
}

int EnvInt(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) throw std::runtime_error(std::string(name) + " is not set");
  return std::atoi(value);
}

// One process per GPU, started by infini_run: the ids travel through the
// launcher's store.
int RunProcess(const std::shared_ptr<const Backend>& backend) {
  Rank r;
  r.rank = EnvInt(infini::env::torchrun::kRank);
  r.world = EnvInt(infini::env::torchrun::kWorldSize);
  // Under --isolate_devices the process sees only its own device.
  const char* isolated = std::getenv(infini::env::kDevicesIsolated);
  r.device = isolated != nullptr && std::strcmp(isolated, "1") == 0
                 ? 0
                 : EnvInt(infini::env::torchrun::kLocalRank);
  r.backend = backend;
  r.sync_ranks = [] {};  // the warm-up collectives line the ranks up
  const char* run_id = std::getenv(infini::env::kRunId);
  const std::string prefix = std::string(run_id != nullptr ? run_id : "run") + "/nccl_overhead/";
  auto store = rendezvous::TcpStoreClient::Connect(
      std::getenv(infini::env::kStoreAddr), static_cast<uint16_t>(EnvInt(infini::env::kStorePort)),
      rendezvous::Store::kDefaultTimeout, rendezvous::RunTokenFromEnvironment());
  ncclUniqueId direct_id;
  UniqueId plugin_id;
  if (r.rank == 0) {
    backend->SetDevice(r.device);
    NcclCheck(ncclGetUniqueId(&direct_id), "ncclGetUniqueId");
    plugin_id = backend->GetUniqueId();
    store->Set(prefix + "direct_id", std::string(direct_id.internal, sizeof(direct_id.internal)));
    store->Set(prefix + "plugin_id", plugin_id.ToBytes());
    std::printf("%s\n", VersionLine(*backend, r.world, "processes").c_str());
  } else {
    const std::string direct_bytes = store->Get(prefix + "direct_id");
    std::copy(direct_bytes.begin(), direct_bytes.end(), direct_id.internal);
    plugin_id = UniqueId::FromBytes(store->Get(prefix + "plugin_id"));
  }
  RunRank(r, direct_id, plugin_id);
  return 0;
}

}  // namespace
}  // namespace infini::ccl::nccl_bench

int main(int argc, char** argv) {
  infini::flags::Parse(&argc, &argv, "[infini_run [launcher flags] --] nccl_overhead_bench [flags]",
                       "Direct NCCL vs InfiniCCL plugin: time, bus bandwidth, host overhead.");
  using namespace infini::ccl::nccl_bench;
  try {
    auto backend = infini::ccl::Backend::Load("nccl");
    const bool launched = std::getenv(infini::env::torchrun::kWorldSize) != nullptr &&
                          std::getenv(infini::env::kStoreAddr) != nullptr;
    return launched ? RunProcess(backend) : RunThreads(backend);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "nccl_overhead_bench: %s\n", error.what());
    return 1;
  }
}
