// The staged collectives. Each call orders the communicator's own stream
// after the caller's (an event), copies the device input to host memory
// there, runs the transport's collective on the host buffers, copies the
// result back there and orders the caller's stream after that (another
// event): the caller's stream is never synchronized by the host. The call
// returns once the host collective is done and the copies back are
// enqueued (the ABI has no entry that would let a stream wait for host
// work, so the host part cannot be deferred past the return).
//
// Element-wise collectives (all_reduce, broadcast, reduce) go in chunks of
// INFINI_CCL_STAGED_CHUNK_BYTES (default 4 MiB): the copy to the host of
// chunk k+1 runs while the host reduces chunk k.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "staged_comm.h"
#include "staged_hierarchy.h"
#include "staged_shared_memory.h"

namespace infini::ccl::internal::staged {
namespace {

size_t ElementBytes(DLDataType dtype) {
  return (static_cast<size_t>(dtype.bits) * dtype.lanes + 7) / 8;
}

size_t ChunkBytes() {
  static const size_t bytes = [] {
    const char* text = std::getenv("INFINI_CCL_STAGED_CHUNK_BYTES");
    if (text == nullptr || *text == '\0') return size_t{4} << 20;
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    // A bad value is the default, as a bound on a cache would be: never a failure.
    return (*end != '\0' || value == 0) ? size_t{4} << 20 : static_cast<size_t>(value);
  }();
  return bytes;
}

const char* At(const void* base, size_t offset) { return static_cast<const char*>(base) + offset; }
char* At(void* base, size_t offset) { return static_cast<char*>(base) + offset; }

// Collectives between GroupStart and GroupEnd on this thread: the
// transport runs them at its group_end, so each keeps host buffers of its
// own until then, and its copies back are enqueued after it.
struct CopyBack {
  void* device;
  size_t host_offset, bytes;
};
struct GroupedCall {
  StagedComm* comm;
  infiniCclStream_t caller;
  std::unique_ptr<char[]> send, recv;
  std::vector<CopyBack> copies;
};
thread_local int t_group_depth = 0;
thread_local std::vector<GroupedCall> t_grouped;

// One staged call on one communicator: each step does nothing once one
// failed, and Finish says the first failure.
class Stage {
 public:
  Stage(infiniCclComm_t comm, infiniCclStream_t caller, const char* call)
      : comm_(Of(comm)), caller_(caller), call_(call), lock_(comm_->calls) {
    Device(Dev().event_record(comm_->ready, caller_));
    Device(Dev().stream_wait_event(comm_->stream, comm_->ready));
  }

  bool ok() const { return result_ == infiniCclSuccess; }
  bool grouped() const { return t_group_depth > 0; }
  StagedComm& comm() { return *comm_; }

  // Host buffers of at least these sizes; the copies still in flight from
  // the last call are waited for before a buffer is replaced.
  void Reserve(size_t send_bytes, size_t recv_bytes) {
    if (!ok()) return;
    if (grouped()) {
      own_send_.reset(new (std::nothrow) char[std::max<size_t>(send_bytes, 1)]);
      own_recv_.reset(new (std::nothrow) char[std::max<size_t>(recv_bytes, 1)]);
      host_send_ = own_send_.get();
      host_recv_ = own_recv_.get();
    } else {
      if (send_bytes > comm_->send.capacity() || recv_bytes > comm_->recv.capacity()) {
        Device(Dev().stream_synchronize(comm_->stream));
      }
      host_send_ = comm_->send.Reserve(std::max<size_t>(send_bytes, 1));
      host_recv_ = comm_->recv.Reserve(std::max<size_t>(recv_bytes, 1));
    }
    if (ok() && (host_send_ == nullptr || host_recv_ == nullptr)) {
      result_ = Fail(infiniCclSystemError, std::string(call_) + ": cannot allocate " +
                                               std::to_string(send_bytes + recv_bytes) +
                                               " bytes of host staging memory");
    }
  }
  char* host_send() { return host_send_; }
  char* host_recv() { return host_recv_; }

  void ToHost(char* host, const void* device, size_t bytes) {
    if (ok() && bytes > 0) {
      Device(Dev().memcpy_async(host, device, bytes, infiniCclMemcpyDeviceToHost, comm_->stream));
    }
  }
  // From host_recv() + offset; in a group, after the group's end.
  void ToDevice(void* device, size_t offset, size_t bytes) {
    if (!ok() || bytes == 0) return;
    if (grouped()) {
      copies_.push_back({device, offset, bytes});
      return;
    }
    Device(Dev().memcpy_async(device, host_recv_ + offset, bytes, infiniCclMemcpyHostToDevice,
                              comm_->stream));
  }
  void MarkCopied(int slot) {
    if (ok()) Device(Dev().event_record(comm_->chunk_copied[slot], comm_->stream));
  }
  void WaitCopied(int slot) {
    if (ok()) Device(Dev().event_synchronize(comm_->chunk_copied[slot]));
  }
  void WaitCopies() {
    if (ok()) Device(Dev().stream_synchronize(comm_->stream));
  }
  void Host(infiniCclResult_t result) {
    if (ok()) result_ = FromPlugin(Transport(), result, call_);
  }
  int Count() {
    int nranks = 0;
    Host(Transport().comm_count(comm_->transport, &nranks));
    return nranks;
  }
  int Rank() {
    int rank = 0;
    Host(Transport().comm_user_rank(comm_->transport, &rank));
    return rank;
  }

  // Ranks of one host: whether the communicator's shared segment is open
  // (opened at its first call that can use one: a collective of the
  // transport, which every rank reaches at the same call).
  bool SharedSlotsOpen() {
    if (!ok()) return false;
    if (comm_->shared == StagedComm::SharedUse::kUnknown) {
      std::string why;
      const infiniCclResult_t opened =
          SharedSlots::Open(Transport(), comm_->transport, &comm_->slots, &why);
      if (opened != infiniCclSuccess && !why.empty()) {
        result_ = Fail(opened, std::string(call_) + ": " + why);
        return false;
      }
      Host(opened);
      comm_->shared = comm_->slots ? StagedComm::SharedUse::kOn : StagedComm::SharedUse::kOff;
      if (comm_->slots) {
        comm_->slots_registered.Register(comm_->slots->mapping(), comm_->slots->mapped_bytes());
      }
    }
    return ok() && comm_->shared == StagedComm::SharedUse::kOn;
  }
  // Waits in the shared segment; a failure is this call's and the
  // communicator's (comm_get_async_error).
  void Shared(SharedSlots::Phase phase, int64_t sequence) {
    if (!ok()) return;
    std::string why;
    const infiniCclResult_t result =
        comm_->slots->WaitAll(phase, sequence, comm_->aborting, comm_->timeout_ms, &why);
    if (result != infiniCclSuccess) {
      result_ = Fail(result, std::string(call_) + ": " + why);
      comm_->RecordAsyncError(result, LastError());
    }
  }
  // From any host address (the shared result slot).
  void ToDeviceFrom(void* device, const char* host, size_t bytes) {
    if (ok() && bytes > 0) {
      Device(Dev().memcpy_async(device, host, bytes, infiniCclMemcpyHostToDevice, comm_->stream));
    }
  }
  void MarkBack() {
    if (ok()) Device(Dev().event_record(comm_->done, comm_->stream));
  }
  void WaitBack() {
    if (ok()) Device(Dev().event_synchronize(comm_->done));
  }

  // The caller's stream goes on after the copies back; in a group, the
  // buffers wait for GroupEnd.
  infiniCclResult_t Finish() {
    if (ok() && grouped()) {
      t_grouped.push_back(
          {comm_, caller_, std::move(own_send_), std::move(own_recv_), std::move(copies_)});
      return result_;
    }
    if (ok()) Device(Dev().event_record(comm_->done, comm_->stream));
    if (ok()) Device(Dev().stream_wait_event(caller_, comm_->done));
    return result_;
  }

 private:
  static const infiniCclPlugin_t& Dev() { return staged::Device(); }
  void Device(infiniCclResult_t result) {
    if (ok()) result_ = FromPlugin(Dev(), result, call_);
  }

  StagedComm* comm_;
  infiniCclStream_t caller_;
  const char* call_;
  std::lock_guard<std::mutex> lock_;
  infiniCclResult_t result_ = infiniCclSuccess;
  char* host_send_ = nullptr;
  char* host_recv_ = nullptr;
  std::unique_ptr<char[]> own_send_, own_recv_;
  std::vector<CopyBack> copies_;
};

// An element-wise collective in chunks, on one host buffer: `copy_in` and
// `copy_out` say whether this rank's input and result move; `host` runs
// the transport's collective on `count` elements at a host address.
template <typename HostCollective>
infiniCclResult_t Chunked(Stage& stage, const void* sendbuff, void* recvbuff, size_t count,
                          DLDataType dtype, bool copy_in, bool copy_out, HostCollective host) {
  const size_t element = std::max<size_t>(ElementBytes(dtype), 1);
  const size_t bytes = count * element;
  stage.Reserve(0, bytes);
  char* buffer = stage.host_recv();
  // In a group the transport runs it later: one chunk.
  const size_t per_chunk =
      stage.grouped() ? std::max<size_t>(count, 1) : std::max<size_t>(ChunkBytes() / element, 1);
  const size_t chunks = count == 0 ? 1 : (count + per_chunk - 1) / per_chunk;
  const auto offset = [&](size_t k) { return std::min(k * per_chunk, count) * element; };
  const auto length = [&](size_t k) { return offset(k + 1) - offset(k); };
  if (copy_in) stage.ToHost(buffer, sendbuff, length(0));
  stage.MarkCopied(0);
  for (size_t k = 0; k < chunks && stage.ok(); ++k) {
    if (k + 1 < chunks) {
      if (copy_in) stage.ToHost(buffer + offset(k + 1), At(sendbuff, offset(k + 1)), length(k + 1));
      stage.MarkCopied(static_cast<int>((k + 1) % 2));
    }
    stage.WaitCopied(static_cast<int>(k % 2));
    stage.Host(host(buffer + offset(k), length(k) / element, stage.comm().transport));
    if (copy_out) stage.ToDevice(At(recvbuff, offset(k)), offset(k), length(k));
  }
  return stage.Finish();
}

// all_reduce among ranks of one host (staged_shared_memory.h), chunk by
// chunk: every rank copies its chunk to its slot, reduces its share of the
// chunk across every slot into the result slot, and copies the whole result
// back. No byte crosses a socket, and the copy in of chunk k+1 overlaps the
// reduction of chunk k (two slots each).
infiniCclResult_t SharedAllReduce(Stage& stage, const void* sendbuff, void* recvbuff, size_t count,
                                  DLDataType dtype, infiniCclRedOp_t op) {
  StagedComm& comm = stage.comm();
  SharedSlots& slots = *comm.slots;
  const size_t element = ElementBytes(dtype);
  const size_t per_chunk = slots.slot_bytes() / element;
  const size_t chunks = (count + per_chunk - 1) / per_chunk;
  const int n = slots.nranks();
  const int me = slots.rank();
  // Chunk k is the communicator's chunk number `first + k`, in slot
  // (first + k) % 2, which chunk first + k - 2 used last.
  const int64_t first = comm.sequence + 1;
  comm.sequence += static_cast<int64_t>(chunks);
  const auto sequence = [&](size_t k) { return first + static_cast<int64_t>(k); };
  const auto slot = [&](size_t k) { return static_cast<int>(sequence(k) % 2); };
  const auto offset = [&](size_t k) { return std::min(k * per_chunk, count) * element; };
  const auto length = [&](size_t k) { return offset(k + 1) - offset(k); };
  const auto copy_in = [&](size_t k) {
    stage.Shared(SharedSlots::kConsumed, sequence(k) - 2);
    stage.ToHost(slots.input(slot(k), me), At(sendbuff, offset(k)), length(k));
    stage.MarkCopied(slot(k));
  };
  copy_in(0);
  std::vector<const char*> sources(static_cast<size_t>(n));
  for (size_t k = 0; k < chunks && stage.ok(); ++k) {
    if (k + 1 < chunks) {
      if (k > 0) {
        // Chunk k - 1's copy back has read its result slot.
        stage.WaitBack();
        if (stage.ok()) slots.Publish(SharedSlots::kConsumed, sequence(k - 1));
      }
      copy_in(k + 1);
    }
    stage.WaitCopied(slot(k));
    if (stage.ok()) slots.Publish(SharedSlots::kArrived, sequence(k));
    stage.Shared(SharedSlots::kArrived, sequence(k));
    if (stage.ok()) {
      const size_t elements = length(k) / element;
      const size_t share = (elements + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
      const size_t begin = std::min(static_cast<size_t>(me) * share, elements);
      const size_t end = std::min(begin + share, elements);
      for (int r = 0; r < n; ++r)
        sources[static_cast<size_t>(r)] = slots.input(slot(k), r) + begin * element;
      HostReduce(slots.result(slot(k)) + begin * element, sources.data(), n, end - begin, dtype,
                 op);
      slots.Publish(SharedSlots::kReduced, sequence(k));
    }
    stage.Shared(SharedSlots::kReduced, sequence(k));
    stage.ToDeviceFrom(At(recvbuff, offset(k)), slots.result(slot(k)), length(k));
    stage.MarkBack();
  }
  // The last copies back have read the result slots before the next call
  // may write them.
  stage.WaitCopies();
  if (stage.ok()) {
    slots.Publish(SharedSlots::kConsumed, comm.sequence);
  } else {
    slots.Abandon();
  }
  // The segment is poisoned after any failure: the communicator's too.
  const infiniCclResult_t result = stage.Finish();
  if (result != infiniCclSuccess) comm.RecordAsyncError(result, LastError());
  return result;
}

// A collective in one step: `in` bytes from sendbuff to the host, the
// transport's collective, `blocks` of the host result back to recvbuff.
struct Block {
  size_t offset, bytes;
};

template <typename HostCollective>
infiniCclResult_t Whole(Stage& stage, const void* sendbuff, size_t in, void* recvbuff,
                        size_t out_extent, const std::vector<Block>& blocks, HostCollective host) {
  stage.Reserve(in, out_extent);
  stage.ToHost(stage.host_send(), sendbuff, in);
  stage.WaitCopies();
  if (stage.ok()) stage.Host(host(stage.host_send(), stage.host_recv(), stage.comm().transport));
  for (const Block& block : blocks) {
    stage.ToDevice(At(recvbuff, block.offset), block.offset, block.bytes);
  }
  return stage.Finish();
}

size_t Extent(const size_t* counts, const size_t* displs, int n, size_t element) {
  size_t end = 0;
  for (int p = 0; p < n; ++p) end = std::max(end, (displs[p] + counts[p]) * element);
  return end;
}

std::vector<Block> Blocks(const size_t* counts, const size_t* displs, int n, size_t element) {
  std::vector<Block> blocks;
  for (int p = 0; p < n; ++p) blocks.push_back({displs[p] * element, counts[p] * element});
  return blocks;
}

infiniCclResult_t PointToPoint(const char* call, bool sending, void* buffer, size_t count,
                               DLDataType dtype, int peer, infiniCclComm_t comm,
                               infiniCclStream_t stream) {
  const size_t bytes = count * ElementBytes(dtype);
  Stage stage(comm, stream, call);
  stage.Reserve(sending ? bytes : 0, sending ? 0 : bytes);
  if (sending) {
    stage.ToHost(stage.host_send(), buffer, bytes);
    stage.WaitCopies();
    if (stage.ok()) {
      stage.Host(
          Transport().send(stage.host_send(), count, dtype, peer, Of(comm)->transport, nullptr));
    }
  } else {
    if (stage.ok()) {
      stage.Host(
          Transport().recv(stage.host_recv(), count, dtype, peer, Of(comm)->transport, nullptr));
    }
    stage.ToDevice(buffer, 0, bytes);
  }
  return stage.Finish();
}

}  // namespace

infiniCclResult_t AllReduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                            infiniCclRedOp_t op, infiniCclComm_t comm, infiniCclStream_t stream) {
  if (count > 0 && t_group_depth == 0) {
    bool islands = false;  // staged_hierarchy.h: large ones through the islands' CCLs
    const infiniCclResult_t chosen = ChooseIslands(*Of(comm), count, dtype, op, &islands);
    if (chosen != infiniCclSuccess) return chosen;
    if (islands) return IslandAllReduce(sendbuff, recvbuff, count, dtype, op, *Of(comm), stream);
  }
  Stage stage(comm, stream, "all_reduce");
  if (count > 0 && !stage.grouped() && HostReduces(dtype, op) && stage.SharedSlotsOpen()) {
    return SharedAllReduce(stage, sendbuff, recvbuff, count, dtype, op);
  }
  return Chunked(stage, sendbuff, recvbuff, count, dtype, true, true,
                 [&](char* host, size_t n, infiniCclComm_t transport) {
                   return Transport().all_reduce(host, host, n, dtype, op, transport, nullptr);
                 });
}

infiniCclResult_t TransportAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                     DLDataType dtype, infiniCclRedOp_t op, int divisor,
                                     StagedComm* comm, infiniCclStream_t stream) {
  Stage stage(Handle(comm), stream, "all_reduce");
  return Chunked(stage, sendbuff, recvbuff, count, dtype, true, true,
                 [&](char* host, size_t n, infiniCclComm_t transport) {
                   const infiniCclResult_t result =
                       Transport().all_reduce(host, host, n, dtype, op, transport, nullptr);
                   if (result == infiniCclSuccess && divisor > 1)
                     HostDivide(host, n, dtype, divisor);
                   return result;
                 });
}

infiniCclResult_t Broadcast(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                            int root, infiniCclComm_t comm, infiniCclStream_t stream) {
  int rank = 0;
  Transport().comm_user_rank(Of(comm)->transport, &rank);
  Stage stage(comm, stream, "broadcast");
  return Chunked(stage, sendbuff, recvbuff, count, dtype, rank == root, true,
                 [&](char* host, size_t n, infiniCclComm_t transport) {
                   return Transport().broadcast(host, host, n, dtype, root, transport, nullptr);
                 });
}

infiniCclResult_t Reduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                         infiniCclRedOp_t op, int root, infiniCclComm_t comm,
                         infiniCclStream_t stream) {
  int rank = 0;
  Transport().comm_user_rank(Of(comm)->transport, &rank);
  Stage stage(comm, stream, "reduce");
  return Chunked(stage, sendbuff, recvbuff, count, dtype, true, rank == root && recvbuff != nullptr,
                 [&](char* host, size_t n, infiniCclComm_t transport) {
                   return Transport().reduce(host, host, n, dtype, op, root, transport, nullptr);
                 });
}

infiniCclResult_t AllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            DLDataType dtype, infiniCclComm_t comm, infiniCclStream_t stream) {
  Stage stage(comm, stream, "all_gather");
  const size_t in = sendcount * ElementBytes(dtype);
  const size_t out = in * static_cast<size_t>(stage.Count());
  return Whole(stage, sendbuff, in, recvbuff, out, {{0, out}},
               [&](char* send, char* recv, infiniCclComm_t transport) {
                 return Transport().all_gather(send, recv, sendcount, dtype, transport, nullptr);
               });
}

infiniCclResult_t ReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                infiniCclStream_t stream) {
  Stage stage(comm, stream, "reduce_scatter");
  const size_t out = recvcount * ElementBytes(dtype);
  const size_t in = out * static_cast<size_t>(stage.Count());
  return Whole(stage, sendbuff, in, recvbuff, out, {{0, out}},
               [&](char* send, char* recv, infiniCclComm_t transport) {
                 return Transport().reduce_scatter(send, recv, recvcount, dtype, op, transport,
                                                   nullptr);
               });
}

infiniCclResult_t AllToAll(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                           infiniCclComm_t comm, infiniCclStream_t stream) {
  Stage stage(comm, stream, "all_to_all");
  const size_t bytes = count * ElementBytes(dtype) * static_cast<size_t>(stage.Count());
  return Whole(stage, sendbuff, bytes, recvbuff, bytes, {{0, bytes}},
               [&](char* send, char* recv, infiniCclComm_t transport) {
                 return Transport().all_to_all(send, recv, count, dtype, transport, nullptr);
               });
}

infiniCclResult_t Gather(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                         int root, infiniCclComm_t comm, infiniCclStream_t stream) {
  Stage stage(comm, stream, "gather");
  const size_t in = count * ElementBytes(dtype);
  const size_t out = stage.Rank() == root ? in * static_cast<size_t>(stage.Count()) : 0;
  return Whole(stage, sendbuff, in, recvbuff, out, {{0, out}},
               [&](char* send, char* recv, infiniCclComm_t transport) {
                 return Transport().gather(send, recv, count, dtype, root, transport, nullptr);
               });
}

infiniCclResult_t Scatter(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                          int root, infiniCclComm_t comm, infiniCclStream_t stream) {
  Stage stage(comm, stream, "scatter");
  const size_t out = count * ElementBytes(dtype);
  const size_t in = stage.Rank() == root ? out * static_cast<size_t>(stage.Count()) : 0;
  return Whole(stage, sendbuff, in, recvbuff, out, {{0, out}},
               [&](char* send, char* recv, infiniCclComm_t transport) {
                 return Transport().scatter(send, recv, count, dtype, root, transport, nullptr);
               });
}

infiniCclResult_t AllToAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                            void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                            DLDataType dtype, infiniCclComm_t comm, infiniCclStream_t stream) {
  Stage stage(comm, stream, "all_to_all_v");
  const int n = stage.Count();
  const size_t element = ElementBytes(dtype);
  return Whole(stage, sendbuff, Extent(sendcounts, sdispls, n, element), recvbuff,
               Extent(recvcounts, rdispls, n, element), Blocks(recvcounts, rdispls, n, element),
               [&](char* send, char* recv, infiniCclComm_t transport) {
                 return Transport().all_to_all_v(send, sendcounts, sdispls, recv, recvcounts,
                                                 rdispls, dtype, transport, nullptr);
               });
}

infiniCclResult_t AllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff,
                             const size_t* recvcounts, const size_t* rdispls, DLDataType dtype,
                             infiniCclComm_t comm, infiniCclStream_t stream) {
  Stage stage(comm, stream, "all_gather_v");
  const int n = stage.Count();
  const size_t element = ElementBytes(dtype);
  return Whole(stage, sendbuff, sendcount * element, recvbuff,
               Extent(recvcounts, rdispls, n, element), Blocks(recvcounts, rdispls, n, element),
               [&](char* send, char* recv, infiniCclComm_t transport) {
                 return Transport().all_gather_v(send, sendcount, recv, recvcounts, rdispls, dtype,
                                                 transport, nullptr);
               });
}

infiniCclResult_t ReduceScatterV(const void* sendbuff, const size_t* sendcounts,
                                 const size_t* sdispls, void* recvbuff, size_t recvcount,
                                 DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                 infiniCclStream_t stream) {
  Stage stage(comm, stream, "reduce_scatter_v");
  const int n = stage.Count();
  const size_t element = ElementBytes(dtype);
  const size_t out = recvcount * element;
  return Whole(stage, sendbuff, Extent(sendcounts, sdispls, n, element), recvbuff, out, {{0, out}},
               [&](char* send, char* recv, infiniCclComm_t transport) {
                 return Transport().reduce_scatter_v(send, sendcounts, sdispls, recv, recvcount,
                                                     dtype, op, transport, nullptr);
               });
}

infiniCclResult_t Send(const void* sendbuff, size_t count, DLDataType dtype, int peer,
                       infiniCclComm_t comm, infiniCclStream_t stream) {
  return PointToPoint("send", true, const_cast<void*>(sendbuff), count, dtype, peer, comm, stream);
}

infiniCclResult_t Recv(void* recvbuff, size_t count, DLDataType dtype, int peer,
                       infiniCclComm_t comm, infiniCclStream_t stream) {
  return PointToPoint("recv", false, recvbuff, count, dtype, peer, comm, stream);
}

infiniCclResult_t Barrier(infiniCclComm_t comm, infiniCclStream_t) {
  return FromPlugin(Transport(), Transport().barrier(Of(comm)->transport, nullptr), "barrier");
}

infiniCclResult_t GroupStart() {
  const infiniCclResult_t result =
      FromPlugin(Transport(), Transport().group_start(), "group_start");
  if (result == infiniCclSuccess) ++t_group_depth;
  return result;
}

infiniCclResult_t GroupEnd() {
  if (t_group_depth > 0) --t_group_depth;
  infiniCclResult_t result = FromPlugin(Transport(), Transport().group_end(), "group_end");
  if (t_group_depth > 0) return result;
  std::vector<GroupedCall> grouped = std::move(t_grouped);
  t_grouped.clear();
  // The results to their devices, then wait: the host buffers die here.
  for (GroupedCall& call : grouped) {
    if (result != infiniCclSuccess) break;
    Stage stage(Handle(call.comm), call.caller, "group_end");
    for (const CopyBack& copy : call.copies) {
      const infiniCclResult_t copied =
          staged::Device().memcpy_async(copy.device, call.recv.get() + copy.host_offset, copy.bytes,
                                        infiniCclMemcpyHostToDevice, call.comm->stream);
      if (copied != infiniCclSuccess) {
        result = FromPlugin(staged::Device(), copied, "group_end");
        break;
      }
    }
    stage.WaitCopies();
    if (const infiniCclResult_t finished = stage.Finish(); result == infiniCclSuccess) {
      result = finished;
    }
  }
  return result;
}

}  // namespace infini::ccl::internal::staged
