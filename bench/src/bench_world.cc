#include "bench_world.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>

#include "infini/common/one_line.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/rank_threads.h"

namespace infini::bench {
namespace {

// Runs `body(thread_rank)` on one thread per rank and rethrows the first
// exception, after every thread has finished. A thread that cannot be made
// is a parallel::ThreadStartError (one line), the others stopped first.
template <typename Body>
void RunOnRankThreads(int threads_per_process, Body body) {
  std::mutex mutex;
  std::exception_ptr first_failure;
  parallel::RunOnThreads(
      threads_per_process,
      "the rank threads (--threads_per_process=" + std::to_string(threads_per_process) + ")",
      [&](int thread_rank) {
        try {
          body(thread_rank);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex);
          if (!first_failure) first_failure = std::current_exception();
        }
      });
  if (first_failure) std::rethrow_exception(first_failure);
}

// "CUDA_VISIBLE_DEVICES='0,1'", "ASCEND_RT_VISIBLE_DEVICES unset", or "" for
// a backend without a visibility variable, for device-selection errors.
std::string VisibleDevicesText(const ccl::BackendInfo& backend) {
  const std::string& variable = backend.visible_devices_env;
  if (variable.empty()) return "";
  const char* value = std::getenv(variable.c_str());
  return value == nullptr ? variable + " unset" : variable + "='" + OneLine(value) + "'";
}

}  // namespace

void RankResources::ActivateDevice() const {
  if (backend().info().device_type != kDLCPU) backend().SetDevice(device_index);
}

void RankResources::Synchronize() const {
  communicator.Barrier(stream);
  stream.Synchronize();
}

double RankResources::ReduceOverRanks(double value, ccl::ReduceOp op) const {
  scalar.CopyFromHost(&value, sizeof(value));
  const ccl::FlatTensor tensor = scalar.AsTensor(ccl::dtype::kFloat64, 1);
  communicator.AllReduce(tensor, tensor, op, stream);
  stream.Synchronize();
  double reduced = 0;
  scalar.CopyToHost(&reduced, sizeof(reduced));
  return reduced;
}

double RankResources::ReduceOverGroup(double value, ccl::ReduceOp op) const {
  if (!group_communicator.valid()) return ReduceOverRanks(value, op);
  scalar.CopyFromHost(&value, sizeof(value));
  const ccl::FlatTensor tensor = scalar.AsTensor(ccl::dtype::kFloat64, 1);
  group_communicator.AllReduce(tensor, tensor, op, stream);
  stream.Synchronize();
  double reduced = 0;
  scalar.CopyToHost(&reduced, sizeof(reduced));
  return reduced;
}

void BenchWorld::SplitGroups(const SplitRule& rule) {
  const int ranks = world_size();
  // Every rank can name every group: a colour is a function of the rank.
  std::map<int, int> sizes;  // by colour, in colour order
  for (int rank = 0; rank < ranks; ++rank) ++sizes[rule.Color(rank)];
  if (std::any_of(sizes.begin(), sizes.end(),
                  [&](const auto& entry) { return entry.second != sizes.begin()->second; })) {
    std::string counts;
    for (const auto& [color, size] : sizes) {
      counts += (counts.empty() ? "" : ", ") + std::to_string(size);
    }
    throw UsageError("--split='" + OneLine(rule.text) + "' on " + std::to_string(ranks) +
                     " ranks makes groups of " + counts +
                     " ranks: ccl_bench times groups of one size");
  }
  RunOnRankThreads(threads_per_process(), [&](int thread_rank) {
    RankResources& resources = rank(thread_rank);
    resources.ActivateDevice();
    const int global_rank = resources.rank.global_rank();
    const int color = rule.Color(global_rank);
    resources.group_communicator = resources.communicator.Split(color, global_rank);
    resources.group_count = static_cast<int>(sizes.size());
    resources.group_index = static_cast<int>(std::distance(sizes.begin(), sizes.find(color)));
  });
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
    const int device_index = parallel::SelectDeviceIndex(
        rank, device_type, visible_devices,
        {.allow_sharing = settings.allow_device_sharing,
         .isolated = settings.devices_isolated,
         .visible_devices_variable = VisibleDevicesText(backend.info())});
    world->ranks_.push_back(std::make_unique<RankResources>(rank, device_index));
  }

  // Global process 0 makes the id; every other process reads it from the
  // run's store, which is also lent to the plugin as its bootstrap (a plugin
  // such as oneCCL's needs one even for a single process).
  world->store_ = std::make_unique<conformance::RunStore>(settings, world->topology_, "ccl_bench");
  const std::shared_ptr<rendezvous::Store> store = world->store_->Connect();
  auto bootstrap = conformance::MakeBootstrap(*world->store_, "world/bootstrap/");
  ccl::UniqueId unique_id;
  if (world->topology_.global_proc_rank == 0) {
    unique_id = backend.GetUniqueId(bootstrap);
    store->Set("world/unique_id", unique_id.ToBytes());
  } else {
    unique_id = ccl::UniqueId::FromBytes(store->Get("world/unique_id"));
  }

  const int world_size = world->ranks_.front()->rank.world_size();
  ccl::CommConfig config;
  config.name = "ccl_bench";
  config.timeout_ms = settings.timeout.count();
  config.allow_device_sharing = settings.allow_device_sharing;
  // All of this process's ranks in one call: the plugin's multi-device init
  // where it has one (some libraries cannot init ranks from threads), else
  // the C++ layer's concurrent or grouped comm_init_rank.
  std::vector<int> ranks, devices;
  for (const auto& resources : world->ranks_) {
    ranks.push_back(resources->rank.global_rank());
    devices.push_back(resources->device_index);
  }
  std::vector<ccl::Communicator> communicators =
      backend.CommInitRanks(world_size, unique_id, ranks, devices, config, bootstrap);
  for (size_t index = 0; index < communicators.size(); ++index) {
    world->ranks_[index]->communicator = std::move(communicators[index]);
  }
  RunOnRankThreads(threads_per_process, [&](int thread_rank) {
    RankResources& resources = world->rank(thread_rank);
    resources.ActivateDevice();
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
    if (resources.group_communicator.valid()) resources.group_communicator.Destroy();
    resources.communicator.Destroy();
  });
}

BenchWorld::~BenchWorld() = default;

}  // namespace infini::bench
