// Communicator: membership in a group, and the collectives on it. Every call
// checks its arguments and the backend's declared capabilities first, so a
// caller's mistake or a missing feature is one clear Error, and the plugin
// only ever sees calls it said it can serve.
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "bootstrap_bridge.h"
#include "comm_config.h"
#include "deferred_init.h"
#include "infini/ccl/ccl.h"
#include "infini/ccl/plugin_table.h"
#include "membership.h"
#include "missing_entry.h"
#include "process_exit.h"
#include "tensor_checks.h"
#include "trace_recorder.h"

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

// A raw buffer of `blocks` × `count` elements as the 1-D tensor the checks
// see (its shape lives in the FlatTensor: no allocation).
FlatTensor RawTensor(std::string_view operation, const void* data, size_t count, size_t blocks,
                     DLDataType dtype, DLDevice device) {
  constexpr auto kLargest = static_cast<size_t>(std::numeric_limits<int64_t>::max());
  if (count > kLargest / blocks) [[unlikely]] {
    throw Error(infiniCclInvalidArgument, std::string(operation) + ": count " +
                                              std::to_string(count) + " x " +
                                              std::to_string(blocks) + " blocks is too large");
  }
  return FlatTensor(const_cast<void*>(data), dtype, static_cast<int64_t>(count * blocks), device);
}

// Where a call enqueues, for its device span: asked only when tracing is on.
auto OnStream(const Communicator& comm, const Stream& stream) {
  return [&comm, &stream] {
    const Backend& backend = *comm.backend();
    return internal::TraceStream{&PluginTable(backend), stream.handle(), comm.device().device_id,
                                 comm.device().device_type == kDLCPU,
                                 internal::GroupIsOpen(backend)};
  };
}

// Blocks of a per-rank count: one per rank (an invalid communicator's 0 is
// refused afterwards, by the tensor path).
size_t Blocks(int world_size) { return world_size > 0 ? static_cast<size_t>(world_size) : 1; }

}  // namespace

Communicator::Communicator(std::shared_ptr<const Backend> backend, infiniCclComm_t handle, int rank,
                           int world_size, std::shared_ptr<internal::BootstrapBridge> bootstrap)
    : backend_(std::move(backend)),
      plugin_(&PluginTable(*backend_)),
      handle_(handle),
      rank_(rank),
      world_size_(world_size),
      bootstrap_(std::move(bootstrap)) {
  int device_index = 0;
  if (plugin_->get_device(&device_index) != infiniCclSuccess) device_index = 0;
  RecordDevice(device_index);
}

Communicator::Communicator(std::shared_ptr<const Backend> backend,
                           std::shared_ptr<internal::DeferredInit> deferred, int rank,
                           int world_size, std::shared_ptr<internal::BootstrapBridge> bootstrap)
    : backend_(std::move(backend)),
      plugin_(&PluginTable(*backend_)),
      deferred_(std::move(deferred)),
      rank_(rank),
      world_size_(world_size),
      bootstrap_(std::move(bootstrap)) {
  RecordDevice(deferred_->device);
}

void Communicator::RecordDevice(int device_index) {
  device_ = DLDevice{backend_->info().device_type, device_index};
}

infiniCclComm_t Communicator::AdoptDeferred() const {
  deferred_->MoveInto(handle_);
  return handle_.load(std::memory_order_acquire);
}

infiniCclComm_t Communicator::TakeOwnedHandle() {
  // Abandon first: after it no adoption can store into handle_.
  infiniCclComm_t made = deferred_ != nullptr ? deferred_->Abandon() : nullptr;
  infiniCclComm_t handle = handle_.exchange(nullptr);
  infiniCclComm_t owned = handle != nullptr ? handle : made;
  if (owned != nullptr) internal::ForgetCommunicator(owned);
  return owned;
}

Communicator::~Communicator() {
  // At exit the vendor runtime may be gone: the handle is left to the
  // process's end.
  if (internal::ProcessIsExiting()) {
    internal::LeaveToProcessEnd(handle());
    return;
  }
  // A destructor cannot report; Destroy() is there for callers who care.
  if (infiniCclComm_t handle = TakeOwnedHandle(); handle != nullptr) {
    plugin_->comm_destroy(handle);
  }
}

Communicator::Communicator(Communicator&& other) noexcept
    : backend_(std::move(other.backend_)),
      plugin_(std::exchange(other.plugin_, nullptr)),
      device_(other.device_),
      handle_(other.handle_.exchange(nullptr)),
      deferred_(std::move(other.deferred_)),
      rank_(std::exchange(other.rank_, -1)),
      world_size_(std::exchange(other.world_size_, 0)),
      bootstrap_(std::move(other.bootstrap_)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    if (infiniCclComm_t handle = TakeOwnedHandle(); handle != nullptr) {
      if (internal::ProcessIsExiting()) {
        internal::LeaveToProcessEnd(handle);
      } else {
        plugin_->comm_destroy(handle);
      }
    }
    backend_ = std::move(other.backend_);
    plugin_ = std::exchange(other.plugin_, nullptr);
    device_ = other.device_;
    handle_.store(other.handle_.exchange(nullptr));
    deferred_ = std::move(other.deferred_);
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
    internal::RefuseMissingEntry(name, CollectiveName(collective));
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
      internal::CheckPair(CheckFor("AllReduce", *this), send, recv, Collective::kAllReduce);
  const internal::TraceScope trace(Collective::kAllReduce, handle(), send.dtype, count, count,
                                   world_size_, rank_, OnStream(*this, stream));
  backend_->Check(plugin_->all_reduce(DataPointer(send), DataPointer(recv), count, send.dtype,
                                      ToPlugin(op), handle(), stream.handle()),
                  "all_reduce");
}

void Communicator::Broadcast(const DLTensor& send, const DLTensor& recv, int root,
                             const Stream& stream) const {
  Require(Collective::kBroadcast, recv.dtype);
  const auto check = CheckFor("Broadcast", *this);
  internal::CheckRank(check, "root", root);
  // Off the root NCCL ignores send; without a data pointer only recv counts.
  const bool no_send = rank_ != root && send.data == nullptr;
  const size_t count = no_send ? internal::CheckTensor(check, "recv", recv)
                               : internal::CheckPair(check, send, recv, Collective::kBroadcast);
  const internal::TraceScope trace(Collective::kBroadcast, handle(), recv.dtype, count, count,
                                   world_size_, rank_, OnStream(*this, stream));
  backend_->Check(plugin_->broadcast(no_send ? nullptr : DataPointer(send), DataPointer(recv),
                                     count, recv.dtype, root, handle(), stream.handle()),
                  "broadcast");
}

void Communicator::Reduce(const DLTensor& send, const DLTensor& recv, ReduceOp op, int root,
                          const Stream& stream) const {
  Require(Collective::kReduce, send.dtype, op);
  const auto check = CheckFor("Reduce", *this);
  internal::CheckRank(check, "root", root);
  // Off the root NCCL ignores recv; without a data pointer only send counts.
  const bool no_recv = rank_ != root && recv.data == nullptr;
  const size_t count = no_recv ? internal::CheckTensor(check, "send", send)
                               : internal::CheckPair(check, send, recv, Collective::kReduce);
  const internal::TraceScope trace(Collective::kReduce, handle(), send.dtype, count, count,
                                   world_size_, rank_, OnStream(*this, stream));
  backend_->Check(plugin_->reduce(DataPointer(send), no_recv ? nullptr : DataPointer(recv), count,
                                  send.dtype, ToPlugin(op), root, handle(), stream.handle()),
                  "reduce");
}

void Communicator::AllGather(const DLTensor& send, const DLTensor& recv,
                             const Stream& stream) const {
  Require(Collective::kAllGather, send.dtype);
  const size_t send_count =
      internal::CheckPair(CheckFor("AllGather", *this), send, recv, Collective::kAllGather);
  const internal::TraceScope trace(Collective::kAllGather, handle(), send.dtype, send_count,
                                   send_count * Blocks(world_size_), world_size_, rank_,
                                   OnStream(*this, stream));
  backend_->Check(plugin_->all_gather(DataPointer(send), DataPointer(recv), send_count, send.dtype,
                                      handle(), stream.handle()),
                  "all_gather");
}

void Communicator::ReduceScatter(const DLTensor& send, const DLTensor& recv, ReduceOp op,
                                 const Stream& stream) const {
  Require(Collective::kReduceScatter, send.dtype, op);
  const size_t send_count =
      internal::CheckPair(CheckFor("ReduceScatter", *this), send, recv, Collective::kReduceScatter);
  const internal::TraceScope trace(Collective::kReduceScatter, handle(), send.dtype,
                                   send_count / Blocks(world_size_), send_count, world_size_, rank_,
                                   OnStream(*this, stream));
  backend_->Check(plugin_->reduce_scatter(DataPointer(send), DataPointer(recv),
                                          send_count / static_cast<size_t>(world_size_), send.dtype,
                                          ToPlugin(op), handle(), stream.handle()),
                  "reduce_scatter");
}

void Communicator::Send(const DLTensor& send, int peer, const Stream& stream) const {
  Require(Collective::kSend, send.dtype);
  internal::RefusePointToPointInHostGroup(*backend_, "Send");
  const auto check = CheckFor("Send", *this);
  internal::CheckRank(check, "peer", peer);
  const size_t count = internal::CheckTensor(check, "send", send);
  const internal::TraceScope trace(Collective::kSend, handle(), send.dtype, count, count,
                                   world_size_, rank_, OnStream(*this, stream));
  backend_->Check(
      plugin_->send(DataPointer(send), count, send.dtype, peer, handle(), stream.handle()), "send");
}

void Communicator::Recv(const DLTensor& recv, int peer, const Stream& stream) const {
  Require(Collective::kRecv, recv.dtype);
  internal::RefusePointToPointInHostGroup(*backend_, "Recv");
  const auto check = CheckFor("Recv", *this);
  internal::CheckRank(check, "peer", peer);
  const size_t count = internal::CheckTensor(check, "recv", recv);
  const internal::TraceScope trace(Collective::kRecv, handle(), recv.dtype, count, count,
                                   world_size_, rank_, OnStream(*this, stream));
  backend_->Check(
      plugin_->recv(DataPointer(recv), count, recv.dtype, peer, handle(), stream.handle()), "recv");
}

void Communicator::AllToAll(const DLTensor& send, const DLTensor& recv,
                            const Stream& stream) const {
  Require(Collective::kAllToAll, send.dtype);
  const size_t count =
      internal::CheckPair(CheckFor("AllToAll", *this), send, recv, Collective::kAllToAll);
  const auto world_size = static_cast<size_t>(world_size_);
  if (count % world_size != 0) {
    throw Error(infiniCclInvalidArgument, "AllToAll: send tensor has " + std::to_string(count) +
                                              " elements, expected a multiple of world_size (" +
                                              std::to_string(world_size) + ")");
  }
  const internal::TraceScope trace(Collective::kAllToAll, handle(), send.dtype, count / world_size,
                                   count, world_size_, rank_, OnStream(*this, stream));
  backend_->Check(plugin_->all_to_all(DataPointer(send), DataPointer(recv), count / world_size,
                                      send.dtype, handle(), stream.handle()),
                  "all_to_all");
}

void Communicator::Barrier(const Stream& stream) const {
  if (!valid()) {
    throw Error(infiniCclInvalidUsage, "barrier: the communicator is not valid");
  }
  const internal::TraceScope trace(Collective::kBarrier, handle(), DLDataType{}, 0, 0, world_size_,
                                   rank_, OnStream(*this, stream));
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
  const internal::TraceScope trace(Collective::kAllToAllV, handle(), send.dtype, send_count,
                                   send_count, world_size_, rank_, OnStream(*this, stream));
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
  const internal::TraceScope trace(Collective::kAllGatherV, handle(), send.dtype, send_count,
                                   recv_count, world_size_, rank_, OnStream(*this, stream));
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
  const internal::TraceScope trace(Collective::kReduceScatterV, handle(), send.dtype, recv_count,
                                   send_count, world_size_, rank_, OnStream(*this, stream));
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
    internal::CheckPair(check, send, recv, Collective::kGather);
  }
  const internal::TraceScope trace(Collective::kGather, handle(), send.dtype, count,
                                   count * Blocks(world_size_), world_size_, rank_,
                                   OnStream(*this, stream));
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
    internal::CheckPair(check, send, recv, Collective::kScatter);
  }
  const internal::TraceScope trace(Collective::kScatter, handle(), recv.dtype, count,
                                   count * Blocks(world_size_), world_size_, rank_,
                                   OnStream(*this, stream));
  backend_->Check(plugin_->scatter(rank_ == root ? DataPointer(send) : nullptr, DataPointer(recv),
                                   count, recv.dtype, root, handle(), stream.handle()),
                  "scatter");
}

// ---- Raw buffers: the DLTensor path on 1-D tensors of device() ----

void Communicator::AllReduce(const void* send, void* recv, size_t count, DLDataType dtype,
                             ReduceOp op, const Stream& stream) const {
  AllReduce(RawTensor("AllReduce", send, count, 1, dtype, device_),
            RawTensor("AllReduce", recv, count, 1, dtype, device_), op, stream);
}

void Communicator::Broadcast(const void* send, void* recv, size_t count, DLDataType dtype, int root,
                             const Stream& stream) const {
  Broadcast(RawTensor("Broadcast", send, count, 1, dtype, device_),
            RawTensor("Broadcast", recv, count, 1, dtype, device_), root, stream);
}

void Communicator::Reduce(const void* send, void* recv, size_t count, DLDataType dtype, ReduceOp op,
                          int root, const Stream& stream) const {
  Reduce(RawTensor("Reduce", send, count, 1, dtype, device_),
         RawTensor("Reduce", recv, count, 1, dtype, device_), op, root, stream);
}

void Communicator::AllGather(const void* send, void* recv, size_t send_count, DLDataType dtype,
                             const Stream& stream) const {
  AllGather(RawTensor("AllGather", send, send_count, 1, dtype, device_),
            RawTensor("AllGather", recv, send_count, Blocks(world_size_), dtype, device_), stream);
}

void Communicator::ReduceScatter(const void* send, void* recv, size_t recv_count, DLDataType dtype,
                                 ReduceOp op, const Stream& stream) const {
  ReduceScatter(RawTensor("ReduceScatter", send, recv_count, Blocks(world_size_), dtype, device_),
                RawTensor("ReduceScatter", recv, recv_count, 1, dtype, device_), op, stream);
}

void Communicator::Send(const void* send, size_t count, DLDataType dtype, int peer,
                        const Stream& stream) const {
  Send(RawTensor("Send", send, count, 1, dtype, device_), peer, stream);
}

void Communicator::Recv(void* recv, size_t count, DLDataType dtype, int peer,
                        const Stream& stream) const {
  Recv(RawTensor("Recv", recv, count, 1, dtype, device_), peer, stream);
}

void Communicator::AllToAll(const void* send, void* recv, size_t count_per_rank, DLDataType dtype,
                            const Stream& stream) const {
  AllToAll(RawTensor("AllToAll", send, count_per_rank, Blocks(world_size_), dtype, device_),
           RawTensor("AllToAll", recv, count_per_rank, Blocks(world_size_), dtype, device_),
           stream);
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
    internal::RefuseMissingEntry(backend_->info().name, "comm_split");
  }
  const internal::PluginConfig plugin_config(config);
  infiniCclComm_t new_handle = nullptr;
  backend_->Check(plugin_->comm_split(handle(), color, key, &new_handle, plugin_config.get()),
                  "comm_split");
  if (new_handle == nullptr) return Communicator();
  const auto [child_rank, child_size] =
      internal::CheckSplitMembership(*backend_, new_handle, world_size_);
  // The child may use the parent's bootstrap: it lives as long as either.
  Communicator child(backend_, new_handle, child_rank, child_size, bootstrap_);
  child.RecordDevice(device_.device_id);  // the parent's, whatever is current here
  return child;
}

Communicator Communicator::Shrink(std::span<const int> excluded_ranks, ShrinkMode mode,
                                  const CommConfig& config) const {
  if (!valid()) {
    throw Error(infiniCclInvalidUsage, "Shrink: the communicator is not valid");
  }
  if (plugin_->comm_shrink == nullptr) {
    internal::RefuseMissingEntry(backend_->info().name, "comm_shrink");
  }
  const std::vector<int32_t> excluded =
      internal::NormalizedExclusion(excluded_ranks, rank_, world_size_);
  const auto [new_rank, new_size] = internal::RankAfterShrink(excluded, rank_, world_size_);
  const internal::PluginConfig plugin_config(config);
  const int32_t flags =
      mode == ShrinkMode::kAbort ? INFINI_CCL_SHRINK_ABORT : INFINI_CCL_SHRINK_DEFAULT;
  infiniCclComm_t new_handle = nullptr;
  backend_->Check(
      plugin_->comm_shrink(handle(), excluded.data(), static_cast<int32_t>(excluded.size()),
                           plugin_config.get(), flags, &new_handle),
      "comm_shrink");
  if (new_handle == nullptr) {
    throw Error(infiniCclInternalError, "backend plugin '" + backend_->info().name +
                                            "' comm_shrink succeeded without a communicator");
  }
  const infiniCclComm_t handles[] = {new_handle};
  const int ranks[] = {new_rank};
  internal::CheckMembership(*backend_, handles, ranks, new_size, "comm_shrink");
  // As a split's child, it may use the parent's bootstrap.
  Communicator shrunk(backend_, new_handle, new_rank, new_size, bootstrap_);
  shrunk.RecordDevice(device_.device_id);
  return shrunk;
}

void Communicator::Revoke() const {
  if (!valid()) {
    throw Error(infiniCclInvalidUsage, "Revoke: the communicator is not valid");
  }
  if (plugin_->comm_revoke == nullptr) {
    internal::RefuseMissingEntry(backend_->info().name, "comm_revoke");
  }
  backend_->Check(plugin_->comm_revoke(handle()), "comm_revoke");
}

void Communicator::Abort() {
  if (plugin_ != nullptr && plugin_->comm_abort == nullptr) {
    internal::RefuseMissingEntry(backend_->info().name, "comm_abort");
  }
  if (internal::ProcessIsExiting()) return internal::LeaveToProcessEnd(handle());
  infiniCclComm_t handle = TakeOwnedHandle();
  if (handle == nullptr) return;
  backend_->Check(plugin_->comm_abort(handle), "comm_abort");
}

void Communicator::Destroy() {
  if (internal::ProcessIsExiting()) return internal::LeaveToProcessEnd(handle());
  infiniCclComm_t handle = TakeOwnedHandle();
  if (handle == nullptr) return;
  backend_->Check(plugin_->comm_destroy(handle), "comm_destroy");
}

infiniCclComm_t Communicator::Release() { return TakeOwnedHandle(); }

}  // namespace infini::ccl
