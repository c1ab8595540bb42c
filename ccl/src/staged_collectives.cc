// The staged collectives. Each call orders the communicator's own stream
// after the caller's (an event), copies the device input to host memory
// there, runs the transport's collective on the host buffers, copies the
// result back there and orders the caller's stream after that: the
// caller's stream is never synchronized by the host.
//
// Where the device plugin has host flags (stream_wait_host_flag), a call is
// deferred: the caller records its event, makes its stream wait for the
// call's ticket in the communicator's host flag, hands the rest to the
// communicator's worker thread and returns, as a device collective does.
// The worker runs the calls in order and writes each ticket once its copies
// back are done; a failure there is the communicator's asynchronous error
// and refuses its later calls. Without host flags, inside a group, and for
// the hierarchical all_reduce, the call runs on the caller's thread (after
// the deferred ones) and returns once the host part is done.
//
// Element-wise collectives (all_reduce, broadcast, reduce) go in chunks of
// INFINI_CCL_STAGED_CHUNK_BYTES (default 4 MiB): the copy to the host of
// chunk k+1 runs while the host reduces chunk k.
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "staged_call.h"
#include "staged_comm.h"
#include "staged_hierarchy.h"
#include "staged_shared_memory.h"

namespace infini::ccl::internal::staged {
namespace {

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

// A v-collective's counts, kept for its deferred part (the caller's arrays
// are valid during the call only).
using Counts = std::vector<size_t>;
Counts Copy(const size_t* values, int n) {
  return values == nullptr ? Counts(static_cast<size_t>(n), 0) : Counts(values, values + n);
}
int CountOf(infiniCclComm_t comm) {
  int nranks = 0;
  Transport().comm_count(Of(comm)->transport, &nranks);
  return nranks;
}

infiniCclResult_t PointToPoint(const char* call, bool sending, void* buffer, size_t count,
                               DLDataType dtype, int peer, infiniCclComm_t comm,
                               infiniCclStream_t stream) {
  const size_t bytes = count * ElementBytes(dtype);
  return Run(comm, stream, call, [=](Stage& stage) {
    stage.Reserve(sending ? bytes : 0, sending ? 0 : bytes);
    infiniCclComm_t transport = stage.comm().transport;
    if (sending) {
      stage.ToHost(stage.host_send(), buffer, bytes);
      stage.WaitCopies();
      if (stage.ok()) {
        stage.Host(Transport().send(stage.host_send(), count, dtype, peer, transport, nullptr));
      }
    } else {
      if (stage.ok()) {
        stage.Host(Transport().recv(stage.host_recv(), count, dtype, peer, transport, nullptr));
      }
      stage.ToDevice(buffer, 0, bytes);
    }
    return stage.Finish();
  });
}

}  // namespace

infiniCclResult_t AllReduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                            infiniCclRedOp_t op, infiniCclComm_t comm, infiniCclStream_t stream) {
  if (count > 0 && GroupDepth() == 0 && Of(comm)->islands_use == StagedComm::IslandUse::kOn) {
    // The island path runs on this thread.
    DrainDeferred(*Of(comm));
    bool islands = false;  // staged_hierarchy.h: large ones through the islands' CCLs
    const infiniCclResult_t chosen = ChooseIslands(*Of(comm), count, dtype, op, &islands);
    if (chosen != infiniCclSuccess) return chosen;
    if (islands) return IslandAllReduce(sendbuff, recvbuff, count, dtype, op, *Of(comm), stream);
  }
  return Run(comm, stream, "all_reduce", [=](Stage& stage) {
    if (count > 0 && !stage.grouped() && HostReduces(dtype, op) && stage.SharedSlotsOpen()) {
      return SharedAllReduce(stage, sendbuff, recvbuff, count, dtype, op);
    }
    return Chunked(stage, sendbuff, recvbuff, count, dtype, true, true,
                   [&](char* host, size_t n, infiniCclComm_t transport) {
                     return Transport().all_reduce(host, host, n, dtype, op, transport, nullptr);
                   });
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
  return Run(comm, stream, "broadcast", [=](Stage& stage) {
    return Chunked(stage, sendbuff, recvbuff, count, dtype, rank == root, true,
                   [&](char* host, size_t n, infiniCclComm_t transport) {
                     return Transport().broadcast(host, host, n, dtype, root, transport, nullptr);
                   });
  });
}

infiniCclResult_t Reduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                         infiniCclRedOp_t op, int root, infiniCclComm_t comm,
                         infiniCclStream_t stream) {
  int rank = 0;
  Transport().comm_user_rank(Of(comm)->transport, &rank);
  return Run(comm, stream, "reduce", [=](Stage& stage) {
    return Chunked(stage, sendbuff, recvbuff, count, dtype, true,
                   rank == root && recvbuff != nullptr,
                   [&](char* host, size_t n, infiniCclComm_t transport) {
                     return Transport().reduce(host, host, n, dtype, op, root, transport, nullptr);
                   });
  });
}

infiniCclResult_t AllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            DLDataType dtype, infiniCclComm_t comm, infiniCclStream_t stream) {
  return Run(comm, stream, "all_gather", [=](Stage& stage) {
    const size_t in = sendcount * ElementBytes(dtype);
    const size_t out = in * static_cast<size_t>(stage.Count());
    return Whole(stage, sendbuff, in, recvbuff, out, {{0, out}},
                 [&](char* send, char* recv, infiniCclComm_t transport) {
                   return Transport().all_gather(send, recv, sendcount, dtype, transport, nullptr);
                 });
  });
}

infiniCclResult_t ReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                infiniCclStream_t stream) {
  return Run(comm, stream, "reduce_scatter", [=](Stage& stage) {
    const size_t out = recvcount * ElementBytes(dtype);
    const size_t in = out * static_cast<size_t>(stage.Count());
    return Whole(stage, sendbuff, in, recvbuff, out, {{0, out}},
                 [&](char* send, char* recv, infiniCclComm_t transport) {
                   return Transport().reduce_scatter(send, recv, recvcount, dtype, op, transport,
                                                     nullptr);
                 });
  });
}

infiniCclResult_t AllToAll(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                           infiniCclComm_t comm, infiniCclStream_t stream) {
  return Run(comm, stream, "all_to_all", [=](Stage& stage) {
    const size_t bytes = count * ElementBytes(dtype) * static_cast<size_t>(stage.Count());
    return Whole(stage, sendbuff, bytes, recvbuff, bytes, {{0, bytes}},
                 [&](char* send, char* recv, infiniCclComm_t transport) {
                   return Transport().all_to_all(send, recv, count, dtype, transport, nullptr);
                 });
  });
}

infiniCclResult_t Gather(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                         int root, infiniCclComm_t comm, infiniCclStream_t stream) {
  return Run(comm, stream, "gather", [=](Stage& stage) {
    const size_t in = count * ElementBytes(dtype);
    const size_t out = stage.Rank() == root ? in * static_cast<size_t>(stage.Count()) : 0;
    return Whole(stage, sendbuff, in, recvbuff, out, {{0, out}},
                 [&](char* send, char* recv, infiniCclComm_t transport) {
                   return Transport().gather(send, recv, count, dtype, root, transport, nullptr);
                 });
  });
}

infiniCclResult_t Scatter(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                          int root, infiniCclComm_t comm, infiniCclStream_t stream) {
  return Run(comm, stream, "scatter", [=](Stage& stage) {
    const size_t out = count * ElementBytes(dtype);
    const size_t in = stage.Rank() == root ? out * static_cast<size_t>(stage.Count()) : 0;
    return Whole(stage, sendbuff, in, recvbuff, out, {{0, out}},
                 [&](char* send, char* recv, infiniCclComm_t transport) {
                   return Transport().scatter(send, recv, count, dtype, root, transport, nullptr);
                 });
  });
}

infiniCclResult_t AllToAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                            void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                            DLDataType dtype, infiniCclComm_t comm, infiniCclStream_t stream) {
  const int n = CountOf(comm);
  const Counts send_counts = Copy(sendcounts, n), send_displs = Copy(sdispls, n);
  const Counts recv_counts = Copy(recvcounts, n), recv_displs = Copy(rdispls, n);
  return Run(comm, stream, "all_to_all_v", [=](Stage& stage) {
    const size_t element = ElementBytes(dtype);
    return Whole(stage, sendbuff, Extent(send_counts.data(), send_displs.data(), n, element),
                 recvbuff, Extent(recv_counts.data(), recv_displs.data(), n, element),
                 Blocks(recv_counts.data(), recv_displs.data(), n, element),
                 [&](char* send, char* recv, infiniCclComm_t transport) {
                   return Transport().all_to_all_v(send, send_counts.data(), send_displs.data(),
                                                   recv, recv_counts.data(), recv_displs.data(),
                                                   dtype, transport, nullptr);
                 });
  });
}

infiniCclResult_t AllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff,
                             const size_t* recvcounts, const size_t* rdispls, DLDataType dtype,
                             infiniCclComm_t comm, infiniCclStream_t stream) {
  const int n = CountOf(comm);
  const Counts recv_counts = Copy(recvcounts, n), recv_displs = Copy(rdispls, n);
  return Run(comm, stream, "all_gather_v", [=](Stage& stage) {
    const size_t element = ElementBytes(dtype);
    return Whole(stage, sendbuff, sendcount * element, recvbuff,
                 Extent(recv_counts.data(), recv_displs.data(), n, element),
                 Blocks(recv_counts.data(), recv_displs.data(), n, element),
                 [&](char* send, char* recv, infiniCclComm_t transport) {
                   return Transport().all_gather_v(send, sendcount, recv, recv_counts.data(),
                                                   recv_displs.data(), dtype, transport, nullptr);
                 });
  });
}

infiniCclResult_t ReduceScatterV(const void* sendbuff, const size_t* sendcounts,
                                 const size_t* sdispls, void* recvbuff, size_t recvcount,
                                 DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                 infiniCclStream_t stream) {
  const int n = CountOf(comm);
  const Counts send_counts = Copy(sendcounts, n), send_displs = Copy(sdispls, n);
  return Run(comm, stream, "reduce_scatter_v", [=](Stage& stage) {
    const size_t element = ElementBytes(dtype);
    const size_t out = recvcount * element;
    return Whole(stage, sendbuff, Extent(send_counts.data(), send_displs.data(), n, element),
                 recvbuff, out, {{0, out}}, [&](char* send, char* recv, infiniCclComm_t transport) {
                   return Transport().reduce_scatter_v(send, send_counts.data(), send_displs.data(),
                                                       recv, recvcount, dtype, op, transport,
                                                       nullptr);
                 });
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
  DrainDeferred(*Of(comm));  // every call made before it has been entered
  return FromPlugin(Transport(), Transport().barrier(Of(comm)->transport, nullptr), "barrier");
}

infiniCclResult_t GroupStart() {
  const infiniCclResult_t result =
      FromPlugin(Transport(), Transport().group_start(), "group_start");
  if (result == infiniCclSuccess) ++GroupDepth();
  return result;
}

infiniCclResult_t GroupEnd() {
  if (GroupDepth() > 0) --GroupDepth();
  infiniCclResult_t result = FromPlugin(Transport(), Transport().group_end(), "group_end");
  if (GroupDepth() > 0) return result;
  std::vector<GroupedCall> grouped = std::move(GroupedCalls());
  GroupedCalls().clear();
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
