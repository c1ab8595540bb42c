// DataParallelGroup over parallel/: the rank layer reads the launcher's
// environment (infini_run, torchrun, Slurm, mpirun), picks the device, meets
// the other ranks through the store and watches every collective.
#include "data_parallel.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "infini/ccl/ccl.h"
#include "infini/common/launch_env.h"
#include "infini/parallel/context.h"
#include "infini/parallel/env_reader.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/process_group.h"

namespace infini::examples::gpt2 {
namespace {

class SingleRank : public DataParallelGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string description() const override { return "none"; }
  void AllReduceAverage(std::span<float>) override {}
  void BroadcastFromMain(std::span<std::byte>) override {}
};

class WorldGroup : public DataParallelGroup {
 public:
  WorldGroup(const std::string& backend_spec, int thread_rank, int threads_per_process) {
    parallel::ContextOptions options;
    options.backend = backend_spec;
    options.thread_rank = thread_rank;
    options.threads_per_process = threads_per_process;
    context_ = parallel::Context::Create(options);
    // A joiner waits here until the survivors admit it at a step boundary.
    if (context_->joining()) joined_ = context_->WaitToBeAdmitted().joined_ranks;
    world_ = context_->NewWorldGroup();
    on_host_ = backend().info().device_type == kDLCPU;
  }

  int rank() const override { return world_->rank(); }
  int world_size() const override { return world_->size(); }
  std::string description() const override {
    return backend().info().name + " (" +
           ccl::DeviceName(DLDevice{backend().info().device_type, context_->device_index()}) + ")";
  }

  void AllReduceAverage(std::span<float> values) override {
    Collective(std::as_writable_bytes(values), ccl::dtype::kFloat32, [&](const DLTensor& tensor) {
      world_->AllReduce(tensor, tensor, ccl::ReduceOp::kAvg);
    });
  }

  void BroadcastFromMain(std::span<std::byte> bytes) override {
    Collective(bytes, ccl::dtype::kUInt8,
               [&](const DLTensor& tensor) { world_->Broadcast(tensor, tensor, 0); });
  }

  bool on_cuda_device() const override { return backend().info().device_type == kDLCUDA; }
  bool recovers_from_loss() const override { return context_->shrink_on_failure(); }
  RecoveredGroup RecoverFromLoss() override {
    const parallel::RecoveredWorld world = context_->RecoverFromLoss();
    return {world.newly_lost_ranks, world_->size(), world_->rank()};
  }
  std::optional<GrownGroup> AdmitJoiners() override {
    try {
      const std::optional<parallel::GrownWorld> grown = context_->AdmitJoiners(*world_);
      if (!grown) return std::nullopt;
      return GrownGroup{grown->joined_ranks, world_->size(), world_->rank()};
    } catch (const parallel::PeerLostError& error) {
      throw RankLostError(error.what());
    }
  }
  bool joined_running_run() const override { return joined_.has_value(); }
  std::shared_ptr<parallel::Context> context() const override { return context_; }
  parallel::ProcessGroup* process_group() override { return world_.get(); }

 private:
  const ccl::Backend& backend() const { return *context_->backend(); }

  // Runs `operation` in place on `bytes` once every rank has the same count.
  // A lost peer is the trainer's RankLostError (it sees no parallel/ type).
  template <typename Operation>
  void Collective(std::span<std::byte> bytes, DLDataType dtype, Operation operation) {
    try {
      RequireSameCountOnEveryRank(static_cast<int64_t>(bytes.size() / ccl::ElementBytes(dtype)));
      InPlace(bytes, dtype, operation);
    } catch (const parallel::PeerLostError& error) {
      throw RankLostError(error.what());
    }
  }

  // Ranks whose model shapes differ would call a collective with different
  // sizes, which a backend may not survive (gloo aborts): one small max
  // all-reduce of (count, -count) first turns that into an error.
  void RequireSameCountOnEveryRank(int64_t count) {
    int64_t bounds[2] = {count, -count};
    InPlace(
        std::as_writable_bytes(std::span<int64_t>(bounds)), ccl::dtype::kInt64,
        [&](const DLTensor& tensor) { world_->AllReduce(tensor, tensor, ccl::ReduceOp::kMax); });
    if (bounds[0] != count || -bounds[1] != count) {
      throw std::runtime_error("ranks disagree on a collective's size: rank " +
                               std::to_string(rank()) + " has " + std::to_string(count) +
                               " elements, the ranks have between " + std::to_string(-bounds[1]) +
                               " and " + std::to_string(bounds[0]) +
                               " (do all ranks build the same model shapes?)");
    }
  }

  // Runs `operation` in place on `bytes`: directly on host backends, through
  // a device buffer (copied in and out) on the others, so the trainer never
  // knows where the backend's memory lives.
  template <typename Operation>
  void InPlace(std::span<std::byte> bytes, DLDataType dtype, Operation operation) {
    if (bytes.empty()) return;
    const int64_t count = static_cast<int64_t>(bytes.size() / ccl::ElementBytes(dtype));
    if (on_host_) {
      operation(ccl::FlatTensor(bytes.data(), dtype, count, DLDevice{kDLCPU, 0}).dl());
      return;
    }
    if (staging_.bytes() < bytes.size()) {
      staging_ = ccl::DeviceBuffer(context_->backend(), bytes.size());
    }
    staging_.CopyFromHost(bytes.data(), bytes.size());
    const ccl::FlatTensor tensor = staging_.AsTensor(dtype, count);
    operation(tensor.dl());
    staging_.CopyToHost(bytes.data(), bytes.size());
  }

  std::shared_ptr<parallel::Context> context_;
  std::unique_ptr<parallel::ProcessGroup> world_;
  bool on_host_ = true;
  ccl::DeviceBuffer staging_;
  std::optional<std::vector<int>> joined_;  // this rank joined a running run
};

}  // namespace

std::unique_ptr<DataParallelGroup> DataParallelGroup::Create(const std::string& backend_spec,
                                                             int thread_rank,
                                                             int threads_per_process) {
  // A direct run is one rank: it needs no backend unless one is named.
  const parallel::ProcessTopology topology =
      parallel::ReadProcessTopology(parallel::CurrentEnvironment());
  const char* backend_variable = std::getenv(infini::env::kBackend);
  const bool backend_named =
      !backend_spec.empty() || (backend_variable != nullptr && *backend_variable != '\0');
  if (topology.proc_world_size() == 1 && threads_per_process == 1 && !backend_named) {
    return std::make_unique<SingleRank>();
  }
  return std::make_unique<WorldGroup>(backend_spec, thread_rank, threads_per_process);
}

}  // namespace infini::examples::gpt2
