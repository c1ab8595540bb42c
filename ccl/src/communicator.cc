// Communicator: membership in a group, and the collectives on it. Every call
// checks its arguments and the backend's declared capabilities first, so a
// caller's mistake or a missing feature is one clear Error, and the plugin
// only ever sees calls it said it can serve.
#include <numeric>
#include <utility>

#include "bootstrap_bridge.h"
#include "comm_config.h"
#include "infini/ccl/ccl.h"
#include "tensor_checks.h"

namespace infini::ccl {
namespace {

infiniCclRedOp_t ToPlugin(ReduceOp op) { return static_cast<infiniCclRedOp_t>(op); }

internal::TensorCheck CheckFor(std::string_view operation, const Communicator& comm) {
  return internal::TensorCheck{operation, comm.backend()->info().device_type, comm.world_size()};
}

// Counts and displacements of a v-collective: one per rank, and every block
// inside the tensor. Returns the number of elements the blocks cover.
void CheckBlocks(const internal::TensorCheck& check, std::string_view role,
                 std::span<const size_t> counts, std::span<const size_t> displacements,
                 size_t tensor_count) {
  const auto ranks = static_cast<size_t>(check.world_size);
  if (counts.size() != ranks || displacements.size() != ranks) {
    throw Error(infiniCclInvalidArgument,
                std::string(check.operation) + ": " + std::string(role) + " counts (" +
                    std::to_string(counts.size()) + ") and displacements (" +
                    std::to_string(displacements.size()) + "), expected one per rank (" +
                    std::to_string(ranks) + ")");
  }
  for (size_t p = 0; p < ranks; ++p) {
    if (displacements[p] > tensor_count || counts[p] > tensor_count - displacements[p]) {
      throw Error(infiniCclInvalidArgument,
                  std::string(check.operation) + ": " + std::string(role) + " block of rank " +
                      std::to_string(p) + " (" + std::to_string(counts[p]) +
                      " elements at displacement " + std::to_string(displacements[p]) +
                      ") reaches past the tensor's " + std::to_string(tensor_count) + " elements");
    }
  }
}

}  // namespace

Communicator::Communicator(std::shared_ptr<const Backend> backend, infiniCclComm_t handle,
                           std::shared_ptr<internal::BootstrapBridge> bootstrap)
    : backend_(std::move(backend)),
      plugin_(&backend_->plugin()),
      handle_(handle),
      bootstrap_(std::move(bootstrap)) {
  backend_->Check(plugin_->comm_user_rank(handle, &rank_), "comm_user_rank");
  backend_->Check(plugin_->comm_count(handle, &world_size_), "comm_count");
}

Communicator::~Communicator() {
  // A destructor cannot report; Destroy() is there for callers who care.
  if (infiniCclComm_t handle = handle_.exchange(nullptr); handle != nullptr) {
    plugin_->comm_destroy(handle);
  }
}

Communicator::Communicator(Communicator&& other) noexcept
    : backend_(std::move(other.backend_)),
      plugin_(std::exchange(other.plugin_, nullptr)),
      handle_(other.handle_.exchange(nullptr)),
      rank_(std::exchange(other.rank_, -1)),
      world_size_(std::exchange(other.world_size_, 0)),
      bootstrap_(std::move(other.bootstrap_)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    if (infiniCclComm_t handle = handle_.exchange(nullptr); handle != nullptr) {
      plugin_->comm_destroy(handle);
    }
    backend_ = std::move(other.backend_);
    plugin_ = std::exchange(other.plugin_, nullptr);
    handle_.store(other.handle_.exchange(nullptr));
    rank_ = std::exchange(other.rank_, -1);
    world_size_ = std::exchange(other.world_size_, 0);
    bootstrap_ = std::move(other.bootstrap_);
  }
  return *this;
}

void Communicator::Require(Collective collective, DLDataType dtype, ReduceOp op) const {
  if (!valid()) {
    throw Error(infiniCclInvalidUsage,
                std::string(CollectiveName(collective)) +
                    ": the communicator is not valid (destroyed, aborted, or this rank is not a "
                    "member)");
  }
  const Capabilities& capabilities = backend_->capabilities();
  if (capabilities.Supports(collective, dtype, op)) return;
  const std::string& name = backend_->info().name;
  if (!capabilities.Implements(collective)) {
    throw Error(infiniCclUnsupported, "backend '" + name + "' does not implement " +
                                          std::string(CollectiveName(collective)) +
                                          " (an optional entry of its plugin)");
  }
  std::string what = std::string(CollectiveName(collective)) + " on " + DataTypeName(dtype);
  if (IsReduction(collective)) what += " with " + std::string(ReduceOpName(op));
  throw Error(infiniCclUnsupported,
              "backend '" + name + "' does not support " + what +
                  " (its plugin declares it unsupported; ccl_info --ccl_backend=" + name +
                  " --capabilities lists what it supports)");
}

void Communicator::AllReduce(const DLTensor& send, const DLTensor& recv, ReduceOp op,
                             const Stream& stream) const {
  Require(Collective::kAllReduce, send.dtype, op);
  const size_t count =
      internal::CheckPair(CheckFor("AllReduce", *this), send, recv, internal::CountRule::kSame);
  backend_->Check(plugin_->all_reduce(DataPointer(send), DataPointer(recv), count, send.dtype,
                                      ToPlugin(op), handle(), stream.handle()),
                  "all_reduce");
}

void Communicator::Broadcast(const DLTensor& send, const DLTensor& recv, int root,
                             const Stream& stream) const {
  Require(Collective::kBroadcast, send.dtype);
  const auto check = CheckFor("Broadcast", *this);
  internal::CheckRank(check, "root", root);
  const size_t count = internal::CheckPair(check, send, recv, internal::CountRule::kSame);
  backend_->Check(plugin_->broadcast(DataPointer(send), DataPointer(recv), count, send.dtype, root,
                                     handle(), stream.handle()),
                  "broadcast");
}

void Communicator::Reduce(const DLTensor& send, const DLTensor& recv, ReduceOp op, int root,
                          const Stream& stream) const {
  Require(Collective::kReduce, send.dtype, op);
  const auto check = CheckFor("Reduce", *this);
  internal::CheckRank(check, "root", root);
  const size_t count = internal::CheckPair(check, send, recv, internal::CountRule::kSame);
  backend_->Check(plugin_->reduce(DataPointer(send), DataPointer(recv), count, send.dtype,
                                  ToPlugin(op), root, handle(), stream.handle()),
                  "reduce");
}

void Communicator::AllGather(const DLTensor& send, const DLTensor& recv,
                             const Stream& stream) const {
  Require(Collective::kAllGather, send.dtype);
  const size_t send_count = internal::CheckPair(CheckFor("AllGather", *this), send, recv,
                                                internal::CountRule::kRecvIsWorldTimesSend);
  backend_->Check(plugin_->all_gather(DataPointer(send), DataPointer(recv), send_count, send.dtype,
                                      handle(), stream.handle()),
                  "all_gather");
}

void Communicator::ReduceScatter(const DLTensor& send, const DLTensor& recv, ReduceOp op,
                                 const Stream& stream) const {
  Require(Collective::kReduceScatter, send.dtype, op);
  const size_t send_count = internal::CheckPair(CheckFor("ReduceScatter", *this), send, recv,
                                                internal::CountRule::kSendIsWorldTimesRecv);
  backend_->Check(plugin_->reduce_scatter(DataPointer(send), DataPointer(recv),
                                          send_count / static_cast<size_t>(world_size_), send.dtype,
                                          ToPlugin(op), handle(), stream.handle()),
                  "reduce_scatter");
}

void Communicator::Send(const DLTensor& send, int peer, const Stream& stream) const {
  Require(Collective::kSend, send.dtype);
  const auto check = CheckFor("Send", *this);
  internal::CheckRank(check, "peer", peer);
  const size_t count = internal::CheckTensor(check, "send", send);
  backend_->Check(
      plugin_->send(DataPointer(send), count, send.dtype, peer, handle(), stream.handle()), "send");
}

void Communicator::Recv(const DLTensor& recv, int peer, const Stream& stream) const {
  Require(Collective::kRecv, recv.dtype);
  const auto check = CheckFor("Recv", *this);
  internal::CheckRank(check, "peer", peer);
  const size_t count = internal::CheckTensor(check, "recv", recv);
  backend_->Check(
      plugin_->recv(DataPointer(recv), count, recv.dtype, peer, handle(), stream.handle()), "recv");
}

void Communicator::AllToAll(const DLTensor& send, const DLTensor& recv,
                            const Stream& stream) const {
  Require(Collective::kAllToAll, send.dtype);
  const size_t count =
      internal::CheckPair(CheckFor("AllToAll", *this), send, recv, internal::CountRule::kSame);
  const auto world_size = static_cast<size_t>(world_size_);
  if (count % world_size != 0) {
    throw Error(infiniCclInvalidArgument, "AllToAll: send tensor has " + std::to_string(count) +
                                              " elements, expected a multiple of world_size (" +
                                              std::to_string(world_size) + ")");
  }
  backend_->Check(plugin_->all_to_all(DataPointer(send), DataPointer(recv), count / world_size,
                                      send.dtype, handle(), stream.handle()),
                  "all_to_all");
}

void Communicator::Barrier(const Stream& stream) const {
  if (!valid()) {
    throw Error(infiniCclInvalidUsage, "barrier: the communicator is not valid");
  }
  if (plugin_->barrier != nullptr) {
    backend_->Check(plugin_->barrier(handle(), stream.handle()), "barrier");
    return;
  }
  // No barrier entry: a one-element all_reduce on device memory orders the
  // ranks the same way.
  DeviceBuffer word(backend_, sizeof(int32_t));
  backend_->Check(plugin_->memset_async(word.data(), 0, sizeof(int32_t), stream.handle()),
                  "memset_async");
  AllReduce(word.AsTensor(dtype::kInt32, 1), word.AsTensor(dtype::kInt32, 1), ReduceOp::kSum,
            stream);
  backend_->Check(plugin_->stream_synchronize(stream.handle()), "stream_synchronize");
}

void Communicator::AllToAllV(const DLTensor& send, std::span<const size_t> send_counts,
                             std::span<const size_t> send_displacements, const DLTensor& recv,
                             std::span<const size_t> recv_counts,
                             std::span<const size_t> recv_displacements,
                             const Stream& stream) const {
  Require(Collective::kAllToAllV, send.dtype);
  const auto check = CheckFor("AllToAllV", *this);
  const size_t send_count = internal::CheckTensor(check, "send", send);
  const size_t recv_count = internal::CheckTensor(check, "recv", recv);
  internal::CheckSameType(check, send, recv);
  CheckBlocks(check, "send", send_counts, send_displacements, send_count);
  CheckBlocks(check, "recv", recv_counts, recv_displacements, recv_count);
  backend_->Check(
      plugin_->all_to_all_v(DataPointer(send), send_counts.data(), send_displacements.data(),
                            DataPointer(recv), recv_counts.data(), recv_displacements.data(),
                            send.dtype, handle(), stream.handle()),
      "all_to_all_v");
}

void Communicator::AllGatherV(const DLTensor& send, const DLTensor& recv,
                              std::span<const size_t> recv_counts,
                              std::span<const size_t> recv_displacements,
                              const Stream& stream) const {
  Require(Collective::kAllGatherV, send.dtype);
  const auto check = CheckFor("AllGatherV", *this);
  const size_t send_count = internal::CheckTensor(check, "send", send);
  const size_t recv_count = internal::CheckTensor(check, "recv", recv);
  internal::CheckSameType(check, send, recv);
  CheckBlocks(check, "recv", recv_counts, recv_displacements, recv_count);
  if (recv_counts[static_cast<size_t>(rank_)] != send_count) {
    throw Error(infiniCclInvalidArgument,
                "AllGatherV: send tensor has " + std::to_string(send_count) +
                    " elements, expected recv_counts[" + std::to_string(rank_) +
                    "] = " + std::to_string(recv_counts[static_cast<size_t>(rank_)]));
  }
  backend_->Check(
      plugin_->all_gather_v(DataPointer(send), send_count, DataPointer(recv), recv_counts.data(),
                            recv_displacements.data(), send.dtype, handle(), stream.handle()),
      "all_gather_v");
}

void Communicator::ReduceScatterV(const DLTensor& send, std::span<const size_t> send_counts,
                                  std::span<const size_t> send_displacements, const DLTensor& recv,
                                  ReduceOp op, const Stream& stream) const {
  Require(Collective::kReduceScatterV, send.dtype, op);
  const auto check = CheckFor("ReduceScatterV", *this);
  const size_t send_count = internal::CheckTensor(check, "send", send);
  const size_t recv_count = internal::CheckTensor(check, "recv", recv);
  internal::CheckSameType(check, send, recv);
  CheckBlocks(check, "send", send_counts, send_displacements, send_count);
  if (send_counts[static_cast<size_t>(rank_)] != recv_count) {
    throw Error(infiniCclInvalidArgument,
                "ReduceScatterV: recv tensor has " + std::to_string(recv_count) +
                    " elements, expected send_counts[" + std::to_string(rank_) +
                    "] = " + std::to_string(send_counts[static_cast<size_t>(rank_)]));
  }
  backend_->Check(
      plugin_->reduce_scatter_v(DataPointer(send), send_counts.data(), send_displacements.data(),
                                DataPointer(recv), recv_count, send.dtype, ToPlugin(op), handle(),
                                stream.handle()),
      "reduce_scatter_v");
}

void Communicator::Gather(const DLTensor& send, const DLTensor& recv, int root,
                          const Stream& stream) const {
  Require(Collective::kGather, send.dtype);
  const auto check = CheckFor("Gather", *this);
  internal::CheckRank(check, "root", root);
  const size_t count = internal::CheckTensor(check, "send", send);
  if (rank_ == root) {
    internal::CheckPair(check, send, recv, internal::CountRule::kRecvIsWorldTimesSend);
  }
  backend_->Check(plugin_->gather(DataPointer(send), rank_ == root ? DataPointer(recv) : nullptr,
                                  count, send.dtype, root, handle(), stream.handle()),
                  "gather");
}

void Communicator::Scatter(const DLTensor& send, const DLTensor& recv, int root,
                           const Stream& stream) const {
  Require(Collective::kScatter, recv.dtype);
  const auto check = CheckFor("Scatter", *this);
  internal::CheckRank(check, "root", root);
  const size_t count = internal::CheckTensor(check, "recv", recv);
  if (rank_ == root) {
    internal::CheckPair(check, send, recv, internal::CountRule::kSendIsWorldTimesRecv);
  }
  backend_->Check(plugin_->scatter(rank_ == root ? DataPointer(send) : nullptr, DataPointer(recv),
                                   count, recv.dtype, root, handle(), stream.handle()),
                  "scatter");
}

infiniCclResult_t Communicator::GetAsyncError(std::string* message) const {
  if (!valid()) {
    throw Error(infiniCclInvalidUsage, "GetAsyncError: the communicator is not valid");
  }
  infiniCclResult_t async_error = infiniCclSuccess;
  const char* text = nullptr;
  backend_->Check(plugin_->comm_get_async_error(handle(), &async_error, &text),
                  "comm_get_async_error");
  if (message != nullptr) *message = text != nullptr ? text : "";
  return async_error;
}

Communicator Communicator::Split(int color, int key, const CommConfig& config) const {
  if (!valid()) {
    throw Error(infiniCclInvalidUsage, "Split: the communicator is not valid");
  }
  if (plugin_->comm_split == nullptr) {
    throw Error(infiniCclUnsupported, "backend '" + backend_->info().name +
                                          "' does not implement comm_split (an optional entry "
                                          "of its plugin)");
  }
  const internal::PluginConfig plugin_config(config);
  infiniCclComm_t new_handle = nullptr;
  backend_->Check(plugin_->comm_split(handle(), color, key, &new_handle, plugin_config.get()),
                  "comm_split");
  if (new_handle == nullptr) return Communicator();
  // The child may use the parent's bootstrap: it lives as long as either.
  return Communicator(backend_, new_handle, bootstrap_);
}

void Communicator::Abort() {
  if (plugin_ != nullptr && plugin_->comm_abort == nullptr) {
    throw Error(infiniCclUnsupported, "backend '" + backend_->info().name +
                                          "' does not implement comm_abort (an optional entry "
                                          "of its plugin)");
  }
  infiniCclComm_t handle = handle_.exchange(nullptr);
  if (handle == nullptr) return;
  backend_->Check(plugin_->comm_abort(handle), "comm_abort");
}

void Communicator::Destroy() {
  infiniCclComm_t handle = handle_.exchange(nullptr);
  if (handle == nullptr) return;
  backend_->Check(plugin_->comm_destroy(handle), "comm_destroy");
}

}  // namespace infini::ccl
