// The collective entries: argument checks that one rank can make, then the
// collective now, or queued for group_end inside a group.
#include <functional>
#include <string>
#include <vector>

#include "collectives.h"
#include "comm_call.h"
#include "entries.h"
#include "group.h"
#include "reduce_kernels.h"

namespace infini::gloo_backend {
namespace {

// Collectives are queued inside a group and run now outside one.
void RunOrDefer(Communicator& comm, std::function<void(Communicator&)> call) {
  if (InGroup()) {
    DeferCollective(comm, std::move(call));
  } else {
    call(comm);
  }
}

void RequireBuffer(const void* buffer, size_t count, const char* name) {
  RequireArgument(count == 0 || buffer != nullptr,
                  std::string(name) + " is NULL with count " + std::to_string(count));
}

void RequireRank(int rank, const Communicator& comm, const char* what) {
  RequireArgument(rank >= 0 && rank < comm.world_size(),
                  std::string(what) + " " + std::to_string(rank) +
                      " is out of range; expected 0.." + std::to_string(comm.world_size() - 1));
}

// A copy of a per-rank array (counts, displacements): the caller's is valid
// during the call only, and a grouped collective runs later.
std::vector<size_t> PerRank(const size_t* values, const Communicator& comm, const char* name) {
  RequireArgument(values != nullptr, std::string(name) + " is NULL");
  return std::vector<size_t>(values, values + comm.world_size());
}

}  // namespace

infiniCclResult_t AllReduceEntry(const void* sendbuff, void* recvbuff, size_t count,
                                 DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                 infiniCclStream_t /*stream*/) {
  return CommCall("all_reduce", comm, [&](Communicator& c) {
    FindReduceFunction(dtype, op);
    RequireBuffer(sendbuff, count, "sendbuff");
    RequireBuffer(recvbuff, count, "recvbuff");
    RunOrDefer(
        c, [=](Communicator& target) { AllReduce(target, sendbuff, recvbuff, count, dtype, op); });
  });
}

infiniCclResult_t BroadcastEntry(const void* sendbuff, void* recvbuff, size_t count,
                                 DLDataType dtype, int root, infiniCclComm_t comm,
                                 infiniCclStream_t /*stream*/) {
  return CommCall("broadcast", comm, [&](Communicator& c) {
    MovableElementBytes(dtype);
    RequireRank(root, c, "root");
    if (c.rank() == root) RequireBuffer(sendbuff, count, "sendbuff");
    RequireBuffer(recvbuff, count, "recvbuff");
    RunOrDefer(c, [=](Communicator& target) {
      Broadcast(target, sendbuff, recvbuff, count, dtype, root);
    });
  });
}

infiniCclResult_t ReduceEntry(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                              infiniCclRedOp_t op, int root, infiniCclComm_t comm,
                              infiniCclStream_t /*stream*/) {
  return CommCall("reduce", comm, [&](Communicator& c) {
    FindReduceFunction(dtype, op);
    RequireRank(root, c, "root");
    RequireBuffer(sendbuff, count, "sendbuff");
    if (c.rank() == root) RequireBuffer(recvbuff, count, "recvbuff");
    RunOrDefer(c, [=](Communicator& target) {
      Reduce(target, sendbuff, recvbuff, count, dtype, op, root);
    });
  });
}

infiniCclResult_t AllGatherEntry(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 DLDataType dtype, infiniCclComm_t comm,
                                 infiniCclStream_t /*stream*/) {
  return CommCall("all_gather", comm, [&](Communicator& c) {
    MovableElementBytes(dtype);
    RequireBuffer(sendbuff, sendcount, "sendbuff");
    RequireBuffer(recvbuff, sendcount, "recvbuff");
    RunOrDefer(
        c, [=](Communicator& target) { AllGather(target, sendbuff, recvbuff, sendcount, dtype); });
  });
}

infiniCclResult_t ReduceScatterEntry(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                     infiniCclStream_t /*stream*/) {
  return CommCall("reduce_scatter", comm, [&](Communicator& c) {
    FindReduceFunction(dtype, op);
    RequireBuffer(sendbuff, recvcount, "sendbuff");
    RequireBuffer(recvbuff, recvcount, "recvbuff");
    RunOrDefer(c, [=](Communicator& target) {
      ReduceScatter(target, sendbuff, recvbuff, recvcount, dtype, op);
    });
  });
}

infiniCclResult_t SendEntry(const void* sendbuff, size_t count, DLDataType dtype, int peer,
                            infiniCclComm_t comm, infiniCclStream_t /*stream*/) {
  return CommCall("send", comm, [&](Communicator& c) {
    const size_t element_bytes = MovableElementBytes(dtype);
    RequireRank(peer, c, "peer");
    RequireBuffer(sendbuff, count, "sendbuff");
    Send(c, sendbuff, count * element_bytes, peer);
  });
}

infiniCclResult_t RecvEntry(void* recvbuff, size_t count, DLDataType dtype, int peer,
                            infiniCclComm_t comm, infiniCclStream_t /*stream*/) {
  return CommCall("recv", comm, [&](Communicator& c) {
    const size_t element_bytes = MovableElementBytes(dtype);
    RequireRank(peer, c, "peer");
    RequireBuffer(recvbuff, count, "recvbuff");
    Recv(c, recvbuff, count * element_bytes, peer);
  });
}

infiniCclResult_t AllToAllEntry(const void* sendbuff, void* recvbuff, size_t count,
                                DLDataType dtype, infiniCclComm_t comm,
                                infiniCclStream_t /*stream*/) {
  return CommCall("all_to_all", comm, [&](Communicator& c) {
    MovableElementBytes(dtype);
    RequireBuffer(sendbuff, count, "sendbuff");
    RequireBuffer(recvbuff, count, "recvbuff");
    RunOrDefer(c,
               [=](Communicator& target) { AllToAll(target, sendbuff, recvbuff, count, dtype); });
  });
}

infiniCclResult_t BarrierEntry(infiniCclComm_t comm, infiniCclStream_t /*stream*/) {
  return CommCall("barrier", comm, [&](Communicator& c) {
    RunOrDefer(c, [](Communicator& target) { Barrier(target); });
  });
}

infiniCclResult_t AllToAllVEntry(const void* sendbuff, const size_t* sendcounts,
                                 const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
                                 const size_t* rdispls, DLDataType dtype, infiniCclComm_t comm,
                                 infiniCclStream_t /*stream*/) {
  return CommCall("all_to_all_v", comm, [&](Communicator& c) {
    MovableElementBytes(dtype);
    auto send_counts = PerRank(sendcounts, c, "sendcounts");
    auto send_displs = PerRank(sdispls, c, "sdispls");
    auto recv_counts = PerRank(recvcounts, c, "recvcounts");
    auto recv_displs = PerRank(rdispls, c, "rdispls");
    const int self = c.rank();
    RequireArgument(send_counts[self] == recv_counts[self],
                    "sendcounts[" + std::to_string(self) + "] " +
                        std::to_string(send_counts[self]) + " differs from recvcounts[" +
                        std::to_string(self) + "] " + std::to_string(recv_counts[self]) +
                        " (this rank's block to itself)");
    size_t sent = 0, received = 0;
    for (int r = 0; r < c.world_size(); ++r) {
      sent += send_counts[r];
      received += recv_counts[r];
    }
    RequireBuffer(sendbuff, sent, "sendbuff");
    RequireBuffer(recvbuff, received, "recvbuff");
    RunOrDefer(c, [=](Communicator& target) {
      AllToAllV(target, sendbuff, send_counts.data(), send_displs.data(), recvbuff,
                recv_counts.data(), recv_displs.data(), dtype);
    });
  });
}

infiniCclResult_t AllGatherVEntry(const void* sendbuff, size_t sendcount, void* recvbuff,
                                  const size_t* recvcounts, const size_t* rdispls, DLDataType dtype,
                                  infiniCclComm_t comm, infiniCclStream_t /*stream*/) {
  return CommCall("all_gather_v", comm, [&](Communicator& c) {
    MovableElementBytes(dtype);
    auto recv_counts = PerRank(recvcounts, c, "recvcounts");
    auto recv_displs = PerRank(rdispls, c, "rdispls");
    const int self = c.rank();
    RequireArgument(sendcount == recv_counts[self],
                    "sendcount " + std::to_string(sendcount) + " differs from recvcounts[" +
                        std::to_string(self) + "] " + std::to_string(recv_counts[self]));
    size_t received = 0;
    for (size_t count : recv_counts) received += count;
    RequireBuffer(sendbuff, sendcount, "sendbuff");
    RequireBuffer(recvbuff, received, "recvbuff");
    RunOrDefer(c, [=](Communicator& target) {
      AllGatherV(target, sendbuff, sendcount, recvbuff, recv_counts.data(), recv_displs.data(),
                 dtype);
    });
  });
}

infiniCclResult_t ReduceScatterVEntry(const void* sendbuff, const size_t* sendcounts,
                                      const size_t* sdispls, void* recvbuff, size_t recvcount,
                                      DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                      infiniCclStream_t /*stream*/) {
  return CommCall("reduce_scatter_v", comm, [&](Communicator& c) {
    FindReduceFunction(dtype, op);
    auto send_counts = PerRank(sendcounts, c, "sendcounts");
    auto send_displs = PerRank(sdispls, c, "sdispls");
    const int self = c.rank();
    RequireArgument(recvcount == send_counts[self],
                    "recvcount " + std::to_string(recvcount) + " differs from sendcounts[" +
                        std::to_string(self) + "] " + std::to_string(send_counts[self]));
    size_t sent = 0;
    for (size_t count : send_counts) sent += count;
    RequireBuffer(sendbuff, sent, "sendbuff");
    RequireBuffer(recvbuff, recvcount, "recvbuff");
    RunOrDefer(c, [=](Communicator& target) {
      ReduceScatterV(target, sendbuff, send_counts.data(), send_displs.data(), recvbuff, dtype, op);
    });
  });
}

infiniCclResult_t GatherEntry(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                              int root, infiniCclComm_t comm, infiniCclStream_t /*stream*/) {
  return CommCall("gather", comm, [&](Communicator& c) {
    MovableElementBytes(dtype);
    RequireRank(root, c, "root");
    RequireBuffer(sendbuff, count, "sendbuff");
    if (c.rank() == root) RequireBuffer(recvbuff, count, "recvbuff");
    RunOrDefer(
        c, [=](Communicator& target) { Gather(target, sendbuff, recvbuff, count, dtype, root); });
  });
}

infiniCclResult_t ScatterEntry(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                               int root, infiniCclComm_t comm, infiniCclStream_t /*stream*/) {
  return CommCall("scatter", comm, [&](Communicator& c) {
    MovableElementBytes(dtype);
    RequireRank(root, c, "root");
    if (c.rank() == root) RequireBuffer(sendbuff, count, "sendbuff");
    RequireBuffer(recvbuff, count, "recvbuff");
    RunOrDefer(
        c, [=](Communicator& target) { Scatter(target, sendbuff, recvbuff, count, dtype, root); });
  });
}

}  // namespace infini::gloo_backend
