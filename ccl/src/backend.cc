#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "infini/ccl/ccl.h"
#include "plugin_loader.h"
#include "tensor_checks.h"

namespace infini::ccl {
namespace {

bool IsBackendName(std::string_view spec) {
  if (spec.empty()) return false;
  for (char c : spec) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!allowed) return false;
  }
  return true;
}

infiniCclConfig_t ToPluginConfig(const CommConfig& config) {
  infiniCclConfig_t plugin_config{};
  plugin_config.struct_size = sizeof(plugin_config);
  plugin_config.blocking = config.blocking ? 1 : 0;
  plugin_config.timeout_ms = config.timeout_ms;
  plugin_config.comm_name = config.name.empty() ? nullptr : config.name.c_str();
  plugin_config.allow_device_sharing = config.allow_device_sharing ? 1 : 0;
  return plugin_config;
}

// One Backend per plugin file per process: plugins own global state (CUDA
// contexts, a bootstrap server), and are never unloaded.
class BackendRegistry {
 public:
  std::shared_ptr<const Backend> Get(std::string_view spec) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string key(spec);
    if (auto found = by_spec_.find(key); found != by_spec_.end()) return found->second;
    std::shared_ptr<const Backend> backend = spec == "auto" ? LoadAuto() : LoadByName(spec);
    by_spec_[key] = backend;
    return backend;
  }

 private:
  std::shared_ptr<const Backend> LoadByName(std::string_view spec) {
    internal::LoadedPlugin loaded = internal::OpenPlugin(spec);
    if (auto found = by_path_.find(loaded.library_path); found != by_path_.end()) {
      return found->second;
    }
    BackendInfo info;
    info.name = loaded.plugin->name;
    info.library_path = loaded.library_path;
    info.abi_version = loaded.plugin->abi_version;
    info.device_type = loaded.plugin->device_type;
    const char* version = nullptr;
    info.version = loaded.plugin->get_version(&version) == infiniCclSuccess && version != nullptr
                       ? version
                       : "unknown";
    auto backend = std::make_shared<const Backend>(loaded.plugin, std::move(info));
    by_path_[backend->info().library_path] = backend;
    return backend;
  }

  // nccl when its plugin loads and sees a device, else gloo.
  std::shared_ptr<const Backend> LoadAuto() {
    try {
      std::shared_ptr<const Backend> nccl = LoadByName("nccl");
      if (nccl->DeviceCount() > 0) return nccl;
    } catch (const std::exception&) {
      // No usable GPU backend here: the CPU backend is the answer.
    }
    return LoadByName("gloo");
  }

  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Backend>> by_spec_;
  std::map<std::string, std::shared_ptr<const Backend>> by_path_;
};

}  // namespace

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "unknown";
}

ReduceOp ParseReduceOp(std::string_view name) {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
    if (ReduceOpName(op) == name) return op;
  }
  throw std::invalid_argument("unknown reduction '" + std::string(name) +
                              "': expected sum, prod, max, min or avg");
}

Backend::Backend(const infiniCclPlugin_v1_t* plugin, BackendInfo info)
    : plugin_(plugin), info_(std::move(info)) {}

std::shared_ptr<const Backend> Backend::Load(std::string_view spec) {
  std::string source = "--ccl_backend";
  if (spec.empty()) {
    const char* from_environment = std::getenv("INFINI_CCL_BACKEND");
    spec = from_environment != nullptr && *from_environment != '\0' ? from_environment : "auto";
    source = "INFINI_CCL_BACKEND";
  }
  if (spec.find('/') == std::string_view::npos && !IsBackendName(spec)) {
    throw LoadError(source + "='" + std::string(spec) +
                    "': expected a backend name (gloo, nccl, auto, or another plugin's name) "
                    "or a path to a plugin library");
  }
  static BackendRegistry registry;
  return registry.Get(spec);
}

void Backend::Check(infiniCclResult_t result, std::string_view what) const {
  // In progress is not a failure: a non-blocking communicator's call goes on
  // in the background, and GetAsyncError says when it is done (NCCL's rule).
  if (result == infiniCclSuccess || result == infiniCclInProgress) return;
  const char* detail = plugin_->get_last_error();
  std::string message = info_.name + " " + std::string(what) + " failed: " + ResultName(result);
  if (detail != nullptr && *detail != '\0') message += ": " + std::string(detail);
  throw Error(result, message);
}

UniqueId Backend::GetUniqueId() const {
  infiniCclUniqueId raw{};
  Check(plugin_->get_unique_id(&raw), "get_unique_id");
  return UniqueId(raw);
}

Communicator Backend::CommInitRank(int world_size, const UniqueId& id, int rank,
                                   const CommConfig& config) const {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw Error(infiniCclInvalidArgument,
                "CommInitRank: rank " + std::to_string(rank) +
                    " is outside [0, world_size=" + std::to_string(world_size) + ")");
  }
  const infiniCclConfig_t plugin_config = ToPluginConfig(config);
  infiniCclComm_t handle = nullptr;
  Check(plugin_->comm_init_rank(&handle, world_size, id.raw(), rank, &plugin_config),
        "comm_init_rank");
  return Communicator(shared_from_this(), handle);
}

infiniCclResult_t Backend::GetAsyncError(const Communicator& comm) const {
  infiniCclResult_t async_error = infiniCclSuccess;
  Check(plugin_->comm_get_async_error(comm.handle(), &async_error), "comm_get_async_error");
  return async_error;
}

void Backend::GroupStart() const { Check(plugin_->group_start(), "group_start"); }
void Backend::GroupEnd() const { Check(plugin_->group_end(), "group_end"); }

namespace {

internal::TensorCheck CheckFor(std::string_view operation, const Backend& backend,
                               const Communicator& comm) {
  if (!comm.valid()) {
    throw Error(infiniCclInvalidUsage, std::string(operation) +
                                           ": the communicator is not valid (destroyed, aborted, "
                                           "or this rank is not a member)");
  }
  return internal::TensorCheck{operation, backend.info().device_type, comm.world_size()};
}

infiniCclRedOp_t ToPlugin(ReduceOp op) { return static_cast<infiniCclRedOp_t>(op); }

}  // namespace

void Backend::AllReduce(const DLTensor& send, const DLTensor& recv, ReduceOp op,
                        const Communicator& comm, const Stream& stream) const {
  const auto check = CheckFor("AllReduce", *this, comm);
  const size_t count = internal::CheckPair(check, send, recv, internal::CountRule::kSame);
  Check(plugin_->all_reduce(DataPointer(send), DataPointer(recv), count, send.dtype, ToPlugin(op),
                            comm.handle(), stream.handle()),
        "all_reduce");
}

void Backend::Broadcast(const DLTensor& send, const DLTensor& recv, int root,
                        const Communicator& comm, const Stream& stream) const {
  const auto check = CheckFor("Broadcast", *this, comm);
  internal::CheckRank(check, "root", root);
  const size_t count = internal::CheckPair(check, send, recv, internal::CountRule::kSame);
  Check(plugin_->broadcast(DataPointer(send), DataPointer(recv), count, send.dtype, root,
                           comm.handle(), stream.handle()),
        "broadcast");
}

void Backend::Reduce(const DLTensor& send, const DLTensor& recv, ReduceOp op, int root,
                     const Communicator& comm, const Stream& stream) const {
  const auto check = CheckFor("Reduce", *this, comm);
  internal::CheckRank(check, "root", root);
  const size_t count = internal::CheckPair(check, send, recv, internal::CountRule::kSame);
  Check(plugin_->reduce(DataPointer(send), DataPointer(recv), count, send.dtype, ToPlugin(op), root,
                        comm.handle(), stream.handle()),
        "reduce");
}

void Backend::AllGather(const DLTensor& send, const DLTensor& recv, const Communicator& comm,
                        const Stream& stream) const {
  const auto check = CheckFor("AllGather", *this, comm);
  const size_t send_count =
      internal::CheckPair(check, send, recv, internal::CountRule::kRecvIsWorldTimesSend);
  Check(plugin_->all_gather(DataPointer(send), DataPointer(recv), send_count, send.dtype,
                            comm.handle(), stream.handle()),
        "all_gather");
}

void Backend::ReduceScatter(const DLTensor& send, const DLTensor& recv, ReduceOp op,
                            const Communicator& comm, const Stream& stream) const {
  const auto check = CheckFor("ReduceScatter", *this, comm);
  const size_t send_count =
      internal::CheckPair(check, send, recv, internal::CountRule::kSendIsWorldTimesRecv);
  Check(plugin_->reduce_scatter(DataPointer(send), DataPointer(recv),
                                send_count / static_cast<size_t>(comm.world_size()), send.dtype,
                                ToPlugin(op), comm.handle(), stream.handle()),
        "reduce_scatter");
}

void Backend::AllToAll(const DLTensor& send, const DLTensor& recv, const Communicator& comm,
                       const Stream& stream) const {
  const auto check = CheckFor("AllToAll", *this, comm);
  if (plugin_->all_to_all == nullptr) {
    throw Error(infiniCclUnsupported, info_.name + " backend does not implement all_to_all");
  }
  const size_t count = internal::CheckPair(check, send, recv, internal::CountRule::kSame);
  const auto world_size = static_cast<size_t>(comm.world_size());
  if (count % world_size != 0) {
    throw Error(infiniCclInvalidArgument, "AllToAll: send tensor has " + std::to_string(count) +
                                              " elements, expected a multiple of world_size (" +
                                              std::to_string(world_size) + ")");
  }
  Check(plugin_->all_to_all(DataPointer(send), DataPointer(recv), count / world_size, send.dtype,
                            comm.handle(), stream.handle()),
        "all_to_all");
}

void Backend::Send(const DLTensor& send, int peer, const Communicator& comm,
                   const Stream& stream) const {
  const auto check = CheckFor("Send", *this, comm);
  internal::CheckRank(check, "peer", peer);
  const size_t count = internal::CheckTensor(check, "send", send);
  Check(plugin_->send(DataPointer(send), count, send.dtype, peer, comm.handle(), stream.handle()),
        "send");
}

void Backend::Recv(const DLTensor& recv, int peer, const Communicator& comm,
                   const Stream& stream) const {
  const auto check = CheckFor("Recv", *this, comm);
  internal::CheckRank(check, "peer", peer);
  const size_t count = internal::CheckTensor(check, "recv", recv);
  Check(plugin_->recv(DataPointer(recv), count, recv.dtype, peer, comm.handle(), stream.handle()),
        "recv");
}

void Backend::Barrier(const Communicator& comm, const Stream& stream) const {
  CheckFor("Barrier", *this, comm);
  Check(plugin_->barrier(comm.handle(), stream.handle()), "barrier");
}

int Backend::DeviceCount() const {
  int count = 0;
  Check(plugin_->get_device_count(&count), "get_device_count");
  return count;
}

void Backend::SetDevice(int device_index) const {
  Check(plugin_->set_device(device_index), "set_device");
}

int Backend::GetDevice() const {
  int device_index = 0;
  Check(plugin_->get_device(&device_index), "get_device");
  return device_index;
}

Communicator Communicator::Split(int color, int key, const CommConfig& config) const {
  if (!valid()) {
    throw Error(infiniCclInvalidUsage, "Split: the communicator is not valid");
  }
  const infiniCclConfig_t plugin_config = ToPluginConfig(config);
  infiniCclComm_t new_handle = nullptr;
  backend_->Check(backend_->plugin().comm_split(handle(), color, key, &new_handle, &plugin_config),
                  "comm_split");
  if (new_handle == nullptr) return Communicator();
  return Communicator(backend_, new_handle);
}

}  // namespace infini::ccl
