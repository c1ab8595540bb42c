// A framework's program on framework::CclImpl (framework_ccl.h), as
// InfiniTrain's ProcessGroup uses its CclImpl:
//  - process mode: one rank per process, or several thread ranks per process
//    (--nthread_per_process): the group's root process makes the unique id
//    and publishes it through the run's store (parallel::UniqueIdExchange),
//    the others receive it; then GroupStart; CommInitRank per local device;
//    GroupEnd;
//  - thread mode in one process: CommInitAll for all its ranks
//    (--init=all), or the same GroupStart / CommInitRank / GroupEnd
//    (--init=group).
// Each rank, driven by its own thread, checks the values of all_reduce,
// broadcast (no send buffer off the root), reduce (no recv buffer off the
// root), all_gather in place (uint16), reduce_scatter and a send/recv ring
// in one group, and GetAsyncError. The communicators live in a static
// registry that is destroyed at exit (--destroy=exit, as InfiniTrain keeps
// them) or are destroyed first (--destroy=explicit).
//
//   infini_run --ccl_backend=gloo --nproc_per_node=2 framework_adapter --nthread_per_process=2
//
// With a backend per device type (--ccl_backend or INFINI_CCL_BACKEND
// "cpu:gloo,ext_dev:gloo+nccl", PyTorch's "cpu:gloo,cuda:nccl"), the
// framework keeps one CclImpl per device type, as InfiniTrain does, and
// runs the same checks with tensors on each type (--tensor_devices=cpu,...;
// default: every type the spec names), each on its type's backend:
//
//   infini_run --ccl_backend=cpu:gloo,cuda:nccl --nproc_per_node=2 framework_adapter
//
// Exit status: 0 when every value is right, 1 on a wrong value or a failure,
// 2 for a bad flag or variable.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "framework_ccl.h"
#include "infini/ccl/ccl.h"
#include "infini/ccl/device_backends.h"
#include "infini/parallel/unique_id_exchange.h"

namespace {

namespace ccl = infini::ccl;
using framework::CclComm;
using framework::CclImpl;
using framework::CclStatus;
using framework::CclUniqueId;
using framework::DataType;
using framework::ReduceOpType;

struct Options {
  int threads = 1;
  bool init_all = false;
  bool destroy_explicitly = false;
  size_t count = 1031;
  std::string backend;
  std::vector<std::string> tensor_devices;  // DLPack type names; empty: the spec's
};

[[noreturn]] void BadInput(const std::string& message) {
  std::fprintf(stderr, "framework_adapter: %s\n", message.c_str());
  std::exit(2);
}

int Positive(const std::string& name, const std::string& text) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 1 || value > 1 << 20) {
    BadInput(name + "='" + text + "': expected a positive integer");
  }
  return static_cast<int>(value);
}

Options ParseFlags(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const size_t equals = flag.find('=');
    const std::string name = flag.substr(0, equals);
    const std::string value = equals == std::string::npos ? "" : flag.substr(equals + 1);
    if (name == "--nthread_per_process") {
      options.threads = Positive(name, value);
    } else if (name == "--count") {
      options.count = static_cast<size_t>(Positive(name, value));
    } else if (name == "--init" && (value == "all" || value == "group")) {
      options.init_all = value == "all";
    } else if (name == "--destroy" && (value == "exit" || value == "explicit")) {
      options.destroy_explicitly = value == "explicit";
    } else if (name == "--ccl_backend" && !value.empty()) {
      options.backend = value;
    } else if (name == "--tensor_devices" && !value.empty()) {
      for (size_t begin = 0; begin <= value.size();) {
        const size_t end = std::min(value.find(',', begin), value.size());
        options.tensor_devices.push_back(value.substr(begin, end - begin));
        begin = end + 1;
      }
    } else {
      BadInput("unknown flag or value '" + flag +
               "': expected --nthread_per_process=N, --count=N, --init=all|group, "
               "--destroy=exit|explicit, --ccl_backend=NAME, --tensor_devices=TYPE,...");
    }
  }
  return options;
}

// Read as InfiniTrain's nn::parallel::global does (infini_run sets them).
int EnvironmentInt(const char* name, int fallback, int minimum) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < minimum) {
    BadInput(std::string(name) + "='" + text +
             "': expected an integer >= " + std::to_string(minimum));
  }
  return static_cast<int>(value);
}

// The framework's registry of communicators: a static that lives until the
// process ends, as InfiniTrain's ProcessGroupFactory does; one group per
// device type its tensors are on.
struct ProcessGroup {
  std::vector<std::unique_ptr<CclComm>> comms;  // one per local rank
};
std::vector<std::unique_ptr<ProcessGroup>> g_worlds;

// What a rank found wrong; printed by its thread, counted by main.
std::mutex g_print_mutex;
int g_failures = 0;

void Report(int rank, const std::string& what) {
  std::lock_guard<std::mutex> lock(g_print_mutex);
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  ++g_failures;
}

template <typename T>
void Expect(int rank, const char* collective, const std::vector<T>& actual,
            const std::vector<T>& expected) {
  for (size_t i = 0; i < expected.size(); ++i) {
    if (actual[i] != expected[i]) {
      Report(rank, std::string(collective) + ": element " + std::to_string(i) + " is " +
                       std::to_string(actual[i]) + ", expected " + std::to_string(expected[i]));
      return;
    }
  }
}

// Device memory through InfiniCCL's device runtime; a framework has its own
// (InfiniTrain: core::DeviceGuardImpl).
template <typename T>
ccl::DeviceBuffer Upload(const std::shared_ptr<const ccl::Backend>& backend,
                         const std::vector<T>& values) {
  ccl::DeviceBuffer buffer(backend, values.size() * sizeof(T));
  buffer.CopyFromHost(values.data(), values.size() * sizeof(T));
  return buffer;
}

template <typename T>
std::vector<T> Download(const ccl::DeviceBuffer& buffer, size_t count) {
  std::vector<T> values(count);
  buffer.CopyToHost(values.data(), count * sizeof(T));
  return values;
}

// One rank's checks: `rank` of `world` on `comm`, driven by this thread.
void CheckCollectives(const CclImpl& impl, const CclComm* comm, int rank, int world, size_t n,
                      const std::shared_ptr<const ccl::Backend>& backend) {
  ccl::Stream stream(backend);  // stands for the framework's own stream
  void* handle = stream.handle();
  const auto w = static_cast<int64_t>(world);

  std::vector<float> sum_in(n), sum_out(n);
  for (size_t i = 0; i < n; ++i) {
    sum_in[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 7));
    sum_out[i] = static_cast<float>(w * (w + 1) / 2 + w * static_cast<int64_t>(i % 7));
  }
  ccl::DeviceBuffer sum = Upload(backend, sum_in);
  impl.AllReduce(sum.data(), sum.data(), n, DataType::kFLOAT32, ReduceOpType::kSum, comm, handle);

  // int16 from the last rank; the others pass no send buffer, as NCCL allows.
  const int root = world - 1;
  std::vector<int16_t> root_values(n), junk(n, -1);
  for (size_t i = 0; i < n; ++i) root_values[i] = static_cast<int16_t>(3 * (i % 4000) - 6000);
  ccl::DeviceBuffer bcast_send = Upload(backend, rank == root ? root_values : junk);
  ccl::DeviceBuffer bcast_recv = Upload(backend, junk);
  impl.Broadcast(rank == root ? bcast_send.data() : nullptr, bcast_recv.data(), n, DataType::kINT16,
                 root, comm, handle);

  // int32 onto rank 0; the others pass no receive buffer.
  std::vector<int32_t> reduce_in(n), reduce_out(n);
  for (size_t i = 0; i < n; ++i) {
    reduce_in[i] = rank * static_cast<int32_t>(i % 100) - 2;
    reduce_out[i] = static_cast<int32_t>(w * (w - 1) / 2) * static_cast<int32_t>(i % 100) -
                    2 * static_cast<int32_t>(w);
  }
  ccl::DeviceBuffer reduce_send = Upload(backend, reduce_in);
  ccl::DeviceBuffer reduce_recv(backend, n * sizeof(int32_t));
  impl.Reduce(reduce_send.data(), rank == 0 ? reduce_recv.data() : nullptr, n, DataType::kINT32,
              ReduceOpType::kSum, 0, comm, handle);

  // uint16 in place: this rank's block already sits at its slot.
  const auto total = static_cast<size_t>(world) * n;
  std::vector<uint16_t> gathered(total, 0), gather_out(total);
  for (size_t p = 0; p < static_cast<size_t>(world); ++p) {
    for (size_t i = 0; i < n; ++i) {
      gather_out[p * n + i] = static_cast<uint16_t>(p * 1000 + i % 1000);
      if (p == static_cast<size_t>(rank)) gathered[p * n + i] = gather_out[p * n + i];
    }
  }
  ccl::DeviceBuffer gather = Upload(backend, gathered);
  impl.AllGather(static_cast<uint16_t*>(gather.data()) + static_cast<size_t>(rank) * n,
                 gather.data(), n, DataType::kUINT16, comm, handle);

  std::vector<double> scatter_in(total), scatter_out(n);
  for (size_t p = 0; p < static_cast<size_t>(world); ++p) {
    for (size_t i = 0; i < n; ++i) scatter_in[p * n + i] = static_cast<double>(rank + p + i % 9);
  }
  for (size_t i = 0; i < n; ++i) {
    scatter_out[i] =
        static_cast<double>(w * (w - 1) / 2 + w * (rank + static_cast<int64_t>(i % 9)));
  }
  ccl::DeviceBuffer scatter_send = Upload(backend, scatter_in);
  ccl::DeviceBuffer scatter_recv(backend, n * sizeof(double));
  impl.ReduceScatter(scatter_send.data(), scatter_recv.data(), n, DataType::kFLOAT64,
                     ReduceOpType::kSum, comm, handle);

  // A ring in one group: everyone sends right, receives from the left.
  const int right = (rank + 1) % world, left = (rank + world - 1) % world;
  std::vector<int64_t> ring_in(n), ring_out(n);
  for (size_t i = 0; i < n; ++i) {
    ring_in[i] = int64_t{rank} * 100000 + static_cast<int64_t>(i);
    ring_out[i] = int64_t{left} * 100000 + static_cast<int64_t>(i);
  }
  ccl::DeviceBuffer ring_send = Upload(backend, ring_in);
  ccl::DeviceBuffer ring_recv(backend, n * sizeof(int64_t));
  impl.GroupStart();
  impl.Send(ring_send.data(), n, DataType::kINT64, right, comm, handle);
  impl.Recv(ring_recv.data(), n, DataType::kINT64, left, comm, handle);
  impl.GroupEnd();

  stream.Synchronize();
  Expect(rank, "all_reduce", Download<float>(sum, n), sum_out);
  Expect(rank, "broadcast", Download<int16_t>(bcast_recv, n), root_values);
  if (rank == 0) Expect(rank, "reduce", Download<int32_t>(reduce_recv, n), reduce_out);
  Expect(rank, "all_gather", Download<uint16_t>(gather, total), gather_out);
  Expect(rank, "reduce_scatter", Download<double>(scatter_recv, n), scatter_out);
  Expect(rank, "send/recv", Download<int64_t>(ring_recv, n), ring_out);
  CclStatus status = CclStatus::kError;
  impl.GetAsyncError(comm, &status);
  if (status != CclStatus::kSuccess) Report(rank, "GetAsyncError is not kSuccess");
}

// Where this process is in the run, read as InfiniTrain reads it.
struct Place {
  int processes = 1;
  int process = 0;
  int local_process = 0;
};

// One world of `options.threads` ranks per process on `impl`, its tensors
// in `backend`'s memory, every collective checked. `group`: the name its
// unique id travels under. Returns false when a value was wrong.
bool RunWorld(const Options& options, const Place& place, const CclImpl& impl,
              const std::shared_ptr<const ccl::Backend>& backend, const std::string& group) {
  const int threads = options.threads;
  const int world = place.processes * threads;
  std::vector<int> devices(static_cast<size_t>(threads));
  // A backend whose ranks may share a device (a staged one) takes them
  // round-robin over the devices there are.
  const int shared = backend->capabilities().device_sharing() ? backend->DeviceCount() : 0;
  for (int t = 0; t < threads; ++t) {
    const int index = place.local_process * threads + t;
    devices[static_cast<size_t>(t)] = shared > 0 ? index % shared : index;
  }
  g_worlds.push_back(std::make_unique<ProcessGroup>());
  std::vector<CclComm*> comms(static_cast<size_t>(threads), nullptr);
  if (options.init_all) {
    impl.CommInitAll(comms.data(), threads, devices.data());
  } else {
    // The root process makes the id; the run's store carries it.
    CclUniqueId* raw_id = nullptr;
    impl.GetUniqueId(&raw_id);
    std::unique_ptr<CclUniqueId> id(raw_id);
    infini::parallel::UniqueIdExchange exchange;
    if (place.process == 0) {
      exchange.Publish(
          group, ccl::UniqueId(std::string(static_cast<const char*>(id->Data()), id->Size())));
    } else {
      const ccl::UniqueId received = exchange.Receive(group);
      id->Load(received.bytes().data(), received.size());
    }
    impl.GroupStart();
    for (int t = 0; t < threads; ++t) {
      backend->SetDevice(devices[static_cast<size_t>(t)]);  // the device guard
      impl.CommInitRank(&comms[static_cast<size_t>(t)], world, *id, place.process * threads + t);
    }
    impl.GroupEnd();
  }
  for (CclComm* comm : comms) g_worlds.back()->comms.emplace_back(comm);

  const int failures_before = g_failures;
  std::vector<std::thread> ranks;
  for (int t = 0; t < threads; ++t) {
    ranks.emplace_back([&, t] {
      const int rank = place.process * threads + t;
      try {
        backend->SetDevice(devices[static_cast<size_t>(t)]);
        CheckCollectives(impl, comms[static_cast<size_t>(t)], rank, world, options.count, backend);
      } catch (const std::exception& error) {
        Report(rank, error.what());
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  if (options.destroy_explicitly) {
    for (CclComm* comm : comms) impl.CommDestroy(comm);
  }
  // Otherwise g_worlds keeps the communicators until static destruction.
  return g_failures == failures_before;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseFlags(argc, argv);
  Place place;
  place.processes = EnvironmentInt("PROC_WORLD_SIZE", 1, 1);
  place.process = EnvironmentInt("GLOBAL_PROC_RANK", 0, 0);
  place.local_process = EnvironmentInt("LOCAL_PROC_RANK", 0, 0);
  if (place.process >= place.processes) {
    BadInput("GLOBAL_PROC_RANK must be below PROC_WORLD_SIZE");
  }
  if (options.init_all && place.processes > 1) {
    BadInput("--init=all: CommInitAll makes every rank in one process, but PROC_WORLD_SIZE='" +
             std::to_string(place.processes) + "'; use --init=group");
  }
  const int world = place.processes * options.threads;
  const char* init = options.init_all ? "CommInitAll" : "GroupStart/CommInitRank/GroupEnd";
  try {
    const char* from_environment = std::getenv("INFINI_CCL_BACKEND");
    const std::string spec = !options.backend.empty()      ? options.backend
                             : from_environment != nullptr ? from_environment
                                                           : "";
    if (!ccl::IsDeviceBackendList(spec) && options.tensor_devices.empty()) {
      // One backend: the framework's single implementation.
      std::unique_ptr<CclImpl> impl = framework::MakeInfiniCclImpl(options.backend);
      const auto backend = ccl::Backend::Load(options.backend);  // the same, for memory
      if (!RunWorld(options, place, *impl, backend, "world")) return 1;
      if (place.process == 0) {
        std::printf(
            "framework_adapter: %d ranks (%d processes x %d threads), backend %s, %s: "
            "all collectives correct\n",
            world, place.processes, options.threads, backend->info().name.c_str(), init);
      }
      return 0;
    }
    // One implementation per device type; each tensor's type picks it.
    const ccl::DeviceBackends backends = ccl::DeviceBackends::Load(spec);
    std::vector<DLDeviceType> types;
    for (const std::string& name : options.tensor_devices) {
      const std::optional<DLDeviceType> type = ccl::DeviceTypeFromName(name);
      if (!type) BadInput("--tensor_devices: '" + name + "' is not a DLPack device type name");
      types.push_back(*type);
    }
    if (types.empty()) {
      for (const auto& entry : backends.entries()) types.push_back(entry.first);
    }
    for (DLDeviceType type : types) {
      const std::string type_name = ccl::DeviceTypeName(type);
      std::unique_ptr<CclImpl> impl = framework::MakeInfiniCclImplFor(spec, type);
      const auto& backend = backends.For(DLDevice{type, 0});  // the same, for memory
      if (!RunWorld(options, place, *impl, backend, "world_" + type_name)) return 1;
      if (place.process == 0) {
        std::printf(
            "framework_adapter: %d ranks (%d processes x %d threads), tensors on %s, backend "
            "%s, %s: all collectives correct\n",
            world, place.processes, options.threads, type_name.c_str(),
            backend->info().name.c_str(), init);
      }
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "framework_adapter: %s\n", error.what());
    return 1;
  }
}
