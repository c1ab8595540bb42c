// The staged collectives, each written once as a staged call's steps
// (staged_call.h): the communicator's stream waits for the caller's, copies
// the device input to host memory, the transport's collective runs on the
// host buffers, the stream copies the result back and the caller's stream
// waits for that: the caller's stream is never synchronized by the host.
// Where the device plugin writes and waits on host flags, the call returns
// once its device steps are enqueued and the communicator's worker runs its
// host steps; without them and inside a group the caller runs them and
// returns after them. The islands' all_reduce (staged_hierarchy.h) enqueues
// the island's device collectives around the leaders' staged one.
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
// `copy_out` say whether this rank's input and result move; `host(at, n)`
// runs the transport's collective on n elements at host address `at`, on
// the worker or now: it holds what it needs by value.
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
  const uint32_t first = stage.Signals(chunks);
  const auto signal = [&](size_t k) { return first + static_cast<uint32_t>(k); };
  const auto offset = [&](size_t k) { return std::min(k * per_chunk, count) * element; };
  const auto length = [&](size_t k) { return offset(k + 1) - offset(k); };
  const auto to_host = [&](size_t k) {
    if (copy_in) stage.ToHost(buffer + offset(k), At(sendbuff, offset(k)), length(k));
    stage.DeviceSignals(Signal::kInputCopied, signal(k));
  };
  const char* call = stage.call();
  to_host(0);
  for (size_t k = 0; k < chunks && stage.ok(); ++k) {
    if (k + 1 < chunks) to_host(k + 1);
    stage.HostAwaits(Signal::kInputCopied, signal(k));
    char* at = buffer + offset(k);
    const size_t elements = length(k) / element;
    stage.OnHost([=] { return Stage::Host(host(at, elements), call); });
    stage.HostSignals(Signal::kResultReady, signal(k));
    stage.DeviceAwaits(Signal::kResultReady, signal(k));
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
  SharedSlots* slots = comm.slots.get();
  const size_t element = ElementBytes(dtype);
  const size_t per_chunk = slots->slot_bytes() / element;
  const size_t chunks = (count + per_chunk - 1) / per_chunk;
  const int n = slots->nranks();
  const int me = slots->rank();
  // Chunk k is the communicator's chunk number `first + k`, in slot
  // (first + k) % 2, which chunk first + k - 2 used last.
  const int64_t first = comm.sequence + 1;
  comm.sequence += static_cast<int64_t>(chunks);
  const uint32_t first_signal = stage.Signals(chunks);
  const auto sequence = [&](size_t k) { return first + static_cast<int64_t>(k); };
  const auto signal = [&](size_t k) { return first_signal + static_cast<uint32_t>(k); };
  const auto slot = [&](size_t k) { return static_cast<int>(sequence(k) % 2); };
  const auto offset = [&](size_t k) { return std::min(k * per_chunk, count) * element; };
  const auto length = [&](size_t k) { return offset(k + 1) - offset(k); };
  const char* call = stage.call();
  // Every rank reached `phase` of chunk `at`; a failure is the
  // communicator's too (the segment is poisoned).
  const auto wait_all = [&](SharedSlots::Phase phase, int64_t at) {
    stage.OnHost([&comm, slots, phase, at, call] {
      std::string why;
      const infiniCclResult_t result =
          slots->WaitAll(phase, at, comm.aborting, comm.timeout_ms, &why);
      if (result != infiniCclSuccess) {
        Fail(result, std::string(call) + ": " + why);
        comm.RecordAsyncError(result, LastError());
      }
      return result;
    });
  };
  const auto publish = [&](SharedSlots::Phase phase, int64_t at) {
    stage.OnHost([slots, phase, at] {
      slots->Publish(phase, at);
      return infiniCclSuccess;
    });
  };
  const auto copy_in = [&](size_t k) {
    wait_all(SharedSlots::kConsumed, sequence(k) - 2);
    stage.HostSignals(Signal::kSlotFree, signal(k));
    stage.DeviceAwaits(Signal::kSlotFree, signal(k));
    stage.ToHost(slots->input(slot(k), me), At(sendbuff, offset(k)), length(k));
    stage.DeviceSignals(Signal::kInputCopied, signal(k));
  };
  stage.OnFailure([slots] { slots->Abandon(); });
  copy_in(0);
  for (size_t k = 0; k < chunks && stage.ok(); ++k) {
    if (k + 1 < chunks) {
      if (k > 0) {
        // Chunk k - 1's copy back has read its result slot.
        stage.HostAwaits(Signal::kResultCopied, signal(k - 1));
        publish(SharedSlots::kConsumed, sequence(k - 1));
      }
      copy_in(k + 1);
    }
    stage.HostAwaits(Signal::kInputCopied, signal(k));
    publish(SharedSlots::kArrived, sequence(k));
    wait_all(SharedSlots::kArrived, sequence(k));
    // This rank's share of the chunk, across every slot, into the result slot.
    const size_t elements = length(k) / element;
    const size_t share = (elements + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
    const size_t begin = std::min(static_cast<size_t>(me) * share, elements);
    const size_t end = std::min(begin + share, elements);
    const int at_slot = slot(k);
    const int64_t at = sequence(k);
    stage.OnHost([slots, n, at_slot, at, begin, end, element, dtype, op] {
      std::vector<const char*> sources(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        sources[static_cast<size_t>(r)] = slots->input(at_slot, r) + begin * element;
      }
      HostReduce(slots->result(at_slot) + begin * element, sources.data(), n, end - begin, dtype,
                 op);
      slots->Publish(SharedSlots::kReduced, at);
      return infiniCclSuccess;
    });
    wait_all(SharedSlots::kReduced, sequence(k));
    stage.HostSignals(Signal::kResultReady, signal(k));
    stage.DeviceAwaits(Signal::kResultReady, signal(k));
    stage.ToDeviceFrom(At(recvbuff, offset(k)), slots->result(slot(k)), length(k));
    stage.DeviceSignals(Signal::kResultCopied, signal(k));
  }
  // The last copies back have read the result slots before the next call
  // may write them.
  stage.HostAwaits(Signal::kResultCopied, signal(chunks - 1));
  publish(SharedSlots::kConsumed, comm.sequence);
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
  char* send = stage.host_send();
  char* recv = stage.host_recv();
  const uint32_t signal = stage.Signals(1);
  const char* call = stage.call();
  stage.ToHost(send, sendbuff, in);
  stage.DeviceSignals(Signal::kInputCopied, signal);
  stage.HostAwaits(Signal::kInputCopied, signal);
  stage.OnHost([=] { return Stage::Host(host(send, recv), call); });
  stage.HostSignals(Signal::kResultReady, signal);
  stage.DeviceAwaits(Signal::kResultReady, signal);
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

// A v-collective's counts, kept for its host steps (the caller's arrays
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
    char* send = stage.host_send();
    char* recv = stage.host_recv();
    const uint32_t signal = stage.Signals(1);
    if (sending) stage.ToHost(send, buffer, bytes);
    stage.DeviceSignals(Signal::kInputCopied, signal);
    stage.HostAwaits(Signal::kInputCopied, signal);
    stage.OnHost([=] {
      return Stage::Host(sending ? Transport().send(send, count, dtype, peer, transport, nullptr)
                                 : Transport().recv(recv, count, dtype, peer, transport, nullptr),
                         call);
    });
    stage.HostSignals(Signal::kResultReady, signal);
    stage.DeviceAwaits(Signal::kResultReady, signal);
    if (!sending) stage.ToDevice(buffer, 0, bytes);
    return stage.Finish();
  });
}

}  // namespace

infiniCclResult_t AllReduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                            infiniCclRedOp_t op, infiniCclComm_t comm, infiniCclStream_t stream) {
  if (count > 0 && GroupDepth() == 0 && Of(comm)->islands_use == StagedComm::IslandUse::kOn) {
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
                   [=, transport = stage.comm().transport](char* host, size_t n) {
                     return Transport().all_reduce(host, host, n, dtype, op, transport, nullptr);
                   });
  });
}

infiniCclResult_t TransportAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                     DLDataType dtype, infiniCclRedOp_t op, int divisor,
                                     StagedComm* comm, infiniCclStream_t stream) {
  return Run(Handle(comm), stream, "all_reduce", [=](Stage& stage) {
    return Chunked(stage, sendbuff, recvbuff, count, dtype, true, true,
                   [=, transport = stage.comm().transport](char* host, size_t n) {
                     const infiniCclResult_t result =
                         Transport().all_reduce(host, host, n, dtype, op, transport, nullptr);
                     if (result == infiniCclSuccess && divisor > 1)
                       HostDivide(host, n, dtype, divisor);
                     return result;
                   });
  });
}

infiniCclResult_t Broadcast(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                            int root, infiniCclComm_t comm, infiniCclStream_t stream) {
  int rank = 0;
  Transport().comm_user_rank(Of(comm)->transport, &rank);
  return Run(comm, stream, "broadcast", [=](Stage& stage) {
    return Chunked(stage, sendbuff, recvbuff, count, dtype, rank == root, true,
                   [=, transport = stage.comm().transport](char* host, size_t n) {
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
                   [=, transport = stage.comm().transport](char* host, size_t n) {
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
                 [=, transport = stage.comm().transport](char* send, char* recv) {
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
                 [=, transport = stage.comm().transport](char* send, char* recv) {
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
                 [=, transport = stage.comm().transport](char* send, char* recv) {
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
                 [=, transport = stage.comm().transport](char* send, char* recv) {
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
                 [=, transport = stage.comm().transport](char* send, char* recv) {
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
                 [=, transport = stage.comm().transport](char* send, char* recv) {
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
                 [=, transport = stage.comm().transport](char* send, char* recv) {
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
    return Whole(
        stage, sendbuff, Extent(send_counts.data(), send_displs.data(), n, element), recvbuff, out,
        {{0, out}}, [=, transport = stage.comm().transport](char* send, char* recv) {
          return Transport().reduce_scatter_v(send, send_counts.data(), send_displs.data(), recv,
                                              recvcount, dtype, op, transport, nullptr);
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
  DrainHostSteps(*Of(comm));  // every call made before it has been entered
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
      stage.ToDeviceFrom(copy.device, call.recv.get() + copy.host_offset, copy.bytes);
    }
    const uint32_t copied = stage.Signals(1);
    stage.DeviceSignals(Signal::kResultCopied, copied);
    stage.HostAwaits(Signal::kResultCopied, copied);
    if (const infiniCclResult_t finished = stage.Finish(); result == infiniCclSuccess) {
      result = finished;
    }
  }
  return result;
}

}  // namespace infini::ccl::internal::staged
