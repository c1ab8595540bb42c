#include "bench_world.h"

#include <exception>
#include <mutex>
#include <thread>

#include "infini/parallel/errors.h"
#include "infini/rendezvous/prefix_store.h"

namespace infini::bench {
namespace {

// Runs `body(thread_rank)` on one thread per rank and rethrows the first
// exception, after every thread has finished.
template <typename Body>
void RunOnRankThreads(int threads_per_process, Body body) {
  std::mutex mutex;
  std::exception_ptr first_failure;
  std::vector<std::thread> threads;
  for (int thread_rank = 0; thread_rank < threads_per_process; ++thread_rank) {
    threads.emplace_back([&, thread_rank] {
      try {
        body(thread_rank);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first_failure) first_failure = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (first_failure) std::rethrow_exception(first_failure);
}

const char* VisibleDevicesVariable(DLDeviceType device_type) {
  return device_type == kDLCUDA ? "CUDA_VISIBLE_DEVICES" : "";
}

}  // namespace

void RankResources::ActivateDevice() const {
  if (backend().info().device_type != kDLCPU) backend().SetDevice(device_index);
}

void RankResources::Synchronize() const {
  backend().Barrier(communicator, stream);
  stream.Synchronize();
}

double RankResources::ReduceOverRanks(double value, ccl::ReduceOp op) const {
  scalar.CopyFromHost(&value, sizeof(value));
  const ccl::FlatTensor tensor = scalar.AsTensor(ccl::dtype::kFloat64, 1);
  backend().AllReduce(tensor, tensor, op, communicator, stream);
  stream.Synchronize();
  double reduced = 0;
  scalar.CopyToHost(&reduced, sizeof(reduced));
  return reduced;
}

std::unique_ptr<BenchWorld> BenchWorld::Create(const std::string& backend_spec,
                                               int threads_per_process) {
  const parallel::Environment environment = parallel::CurrentEnvironment();
  std::unique_ptr<BenchWorld> world(new BenchWorld);
  world->topology_ = parallel::ReadProcessTopology(environment);
  const parallel::RuntimeSettings settings =
      parallel::ReadRuntimeSettings(environment, world->topology_);
  world->backend_ = ccl::Backend::Load(backend_spec);
  const ccl::Backend& backend = *world->backend_;
  const DLDeviceType device_type = backend.info().device_type;
  const int visible_devices = device_type == kDLCPU ? 1 : backend.DeviceCount();

  for (int thread_rank = 0; thread_rank < threads_per_process; ++thread_rank) {
    const parallel::Rank rank(world->topology_, thread_rank, threads_per_process);
    const int device_index = parallel::SelectDeviceIndex(rank, device_type, visible_devices,
                                                         settings.allow_device_sharing,
                                                         VisibleDevicesVariable(device_type));
    world->ranks_.push_back(std::make_unique<RankResources>(rank, device_index));
  }

  // Global process 0 makes the id; every other process reads it from the
  // store. One process alone needs no store.
  const bool is_first_process = world->topology_.global_proc_rank == 0;
  std::unique_ptr<rendezvous::Store> store;
  using Kind = parallel::StoreLocation::Kind;
  if (world->topology_.proc_world_size() > 1 && settings.store.kind != Kind::kInProcess) {
    if (settings.store.kind == Kind::kMaster && is_first_process) {
      world->hosted_store_ = rendezvous::TcpStoreServer::Start({"0.0.0.0", settings.store.port});
    }
    std::shared_ptr<rendezvous::Store> client = rendezvous::TcpStoreClient::Connect(
        settings.store.host, settings.store.port, settings.timeout);
    client->set_timeout(settings.timeout);
    store = std::make_unique<rendezvous::PrefixStore>(
        settings.run_id + "/" + std::to_string(settings.restart_count) + "/ccl_bench", client);
  }
  ccl::UniqueId unique_id;
  if (is_first_process) {
    unique_id = backend.GetUniqueId();
    if (store) store->Set("world/unique_id", unique_id.ToBytes());
  } else {
    unique_id = ccl::UniqueId::FromBytes(store->Get("world/unique_id"));
  }

  const int world_size = world->ranks_.front()->rank.world_size();
  ccl::CommConfig config;
  config.name = "ccl_bench";
  config.timeout_ms = settings.timeout.count();
  config.allow_device_sharing = settings.allow_device_sharing;
  RunOnRankThreads(threads_per_process, [&](int thread_rank) {
    RankResources& resources = world->rank(thread_rank);
    if (device_type != kDLCPU) backend.SetDevice(resources.device_index);
    resources.communicator =
        backend.CommInitRank(world_size, unique_id, resources.rank.global_rank(), config);
    resources.stream = ccl::Stream(world->backend_);
    resources.start = std::make_unique<ccl::Event>(world->backend_);
    resources.stop = std::make_unique<ccl::Event>(world->backend_);
    resources.scalar = ccl::DeviceBuffer(world->backend_, sizeof(double));
  });
  return world;
}

void BenchWorld::Destroy() {
  if (ranks_.empty()) return;
  RunOnRankThreads(threads_per_process(), [&](int thread_rank) {
    RankResources& resources = rank(thread_rank);
    resources.ActivateDevice();
    resources.stream.Synchronize();
    resources.communicator.Destroy();
  });
}

BenchWorld::~BenchWorld() = default;

}  // namespace infini::bench
