#include "variable_collectives.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "communicator.h"
#include "device_runtime.h"
#include "enqueue.h"
#include "errors.h"
#include "types.h"

namespace infini::ccl::nccl {
namespace {

// What every entry here needs to know before it enqueues anything.
struct Layout {
  ncclDataType_t type = ncclUint8;
  size_t scale = 1;          // NCCL elements per element of the caller's type
  size_t element_bytes = 0;  // bytes per element of the caller's type
  int rank = 0;
  int nranks = 0;
};

infiniCclResult_t PrepareMovement(DLDataType datatype, infiniCclComm_t comm, const char* call,
                                  Layout* layout) {
  CCLCHECK(MovementLayout(datatype, call, &layout->type, &layout->scale));
  layout->element_bytes = ElementBytes(datatype);
  CCLCHECK(RequireComm(comm, call));
  CCLCHECK(CommUserRank(comm, &layout->rank));
  return CommCount(comm, &layout->nranks);
}

infiniCclResult_t RequireArrays(const char* call, std::initializer_list<const size_t*> arrays,
                                const char* names) {
  for (const size_t* array : arrays) {
    if (array == nullptr) {
      return Fail(infiniCclInvalidArgument,
                  std::string(call) + ": " + names + " must not be NULL (one entry per rank)");
    }
  }
  return infiniCclSuccess;
}

infiniCclResult_t RequireRoot(const char* call, int root, int nranks) {
  if (root >= 0 && root < nranks) return infiniCclSuccess;
  return Fail(infiniCclInvalidArgument, std::string(call) + ": root " + std::to_string(root) +
                                            " is not in [0, nranks=" + std::to_string(nranks) +
                                            ")");
}

infiniCclResult_t RequireOwnCount(const char* call, const char* own_name, size_t own,
                                  const char* array_name, size_t listed, int rank) {
  if (own == listed) return infiniCclSuccess;
  return Fail(infiniCclInvalidArgument, std::string(call) + ": " + own_name + "=" +
                                            std::to_string(own) + " differs from " + array_name +
                                            "[" + std::to_string(rank) +
                                            "]=" + std::to_string(listed) + " (this rank's block)");
}

const char* At(const void* base, size_t elements, const Layout& layout) {
  return static_cast<const char*>(base) + elements * layout.element_bytes;
}
char* At(void* base, size_t elements, const Layout& layout) {
  return static_cast<char*>(base) + elements * layout.element_bytes;
}

// The block a rank keeps: a device-to-device copy on `stream`, with the
// communicator's device current (the legacy default stream is per device).
// Nothing to do in place.
infiniCclResult_t CopyOwnBlock(void* destination, const void* source, size_t elements,
                               const Layout& layout, const infiniCclComm& comm,
                               infiniCclStream_t stream, const char* call) {
  const size_t bytes = elements * layout.element_bytes;
  if (bytes == 0 || destination == source) return infiniCclSuccess;
  ScopedDevice on_device(comm.device);
  return CheckCuda(
      cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, ToCuda(stream)),
      std::string(call) + ": cudaMemcpyAsync of this rank's own block");
}

infiniCclResult_t SendBlock(const void* buffer, size_t elements, int peer, const Layout& layout,
                            infiniCclComm_t comm, infiniCclStream_t stream, const char* call) {
  return Enqueued(
      ncclSend(buffer, elements * layout.scale, layout.type, peer, comm->nccl, ToCuda(stream)),
      call, comm->nccl);
}

infiniCclResult_t RecvBlock(void* buffer, size_t elements, int peer, const Layout& layout,
                            infiniCclComm_t comm, infiniCclStream_t stream, const char* call) {
  return Enqueued(
      ncclRecv(buffer, elements * layout.scale, layout.type, peer, comm->nccl, ToCuda(stream)),
      call, comm->nccl);
}

}  // namespace

infiniCclResult_t AllToAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                            void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                            DLDataType datatype, infiniCclComm_t comm, infiniCclStream_t stream) {
  constexpr const char* kCall = "all_to_all_v";
  CCLCHECK(RequireArrays(kCall, {sendcounts, sdispls, recvcounts, rdispls},
                         "sendcounts, sdispls, recvcounts and rdispls"));
  Layout layout;
  CCLCHECK(PrepareMovement(datatype, comm, kCall, &layout));
  const int rank = layout.rank;
  CCLCHECK(RequireOwnCount(kCall, "sendcounts[rank]", sendcounts[rank], "recvcounts",
                           recvcounts[rank], rank));
  if (sendbuff == recvbuff) {
    for (int peer = 0; peer < layout.nranks; ++peer) {
      if (peer != rank && (sendcounts[peer] > 0 || recvcounts[peer] > 0)) {
        // Blocks move concurrently: in place, one could be overwritten
        // before it is sent.
        return Fail(infiniCclInvalidArgument,
                    "all_to_all_v: in-place (sendbuff == recvbuff) is not supported by the nccl "
                    "backend; use a separate receive buffer");
      }
    }
  }
  CCLCHECK(CopyOwnBlock(At(recvbuff, rdispls[rank], layout), At(sendbuff, sdispls[rank], layout),
                        sendcounts[rank], layout, *comm, stream, kCall));
  return InNcclGroup(kCall, comm->nccl, [&] {
    for (int peer = 0; peer < layout.nranks; ++peer) {
      if (peer == rank) continue;
      CCLCHECK(SendBlock(At(sendbuff, sdispls[peer], layout), sendcounts[peer], peer, layout, comm,
                         stream, kCall));
      CCLCHECK(RecvBlock(At(recvbuff, rdispls[peer], layout), recvcounts[peer], peer, layout, comm,
                         stream, kCall));
    }
    return infiniCclSuccess;
  });
}

infiniCclResult_t AllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff,
                             const size_t* recvcounts, const size_t* rdispls, DLDataType datatype,
                             infiniCclComm_t comm, infiniCclStream_t stream) {
  constexpr const char* kCall = "all_gather_v";
  CCLCHECK(RequireArrays(kCall, {recvcounts, rdispls}, "recvcounts and rdispls"));
  Layout layout;
  CCLCHECK(PrepareMovement(datatype, comm, kCall, &layout));
  const int rank = layout.rank;
  CCLCHECK(RequireOwnCount(kCall, "sendcount", sendcount, "recvcounts", recvcounts[rank], rank));
  // In place (sendbuff is this rank's block of recvbuff) the copy is a no-op.
  CCLCHECK(CopyOwnBlock(At(recvbuff, rdispls[rank], layout), sendbuff, sendcount, layout, *comm,
                        stream, kCall));
  return InNcclGroup(kCall, comm->nccl, [&] {
    for (int peer = 0; peer < layout.nranks; ++peer) {
      if (peer == rank) continue;
      CCLCHECK(SendBlock(sendbuff, sendcount, peer, layout, comm, stream, kCall));
      CCLCHECK(RecvBlock(At(recvbuff, rdispls[peer], layout), recvcounts[peer], peer, layout, comm,
                         stream, kCall));
    }
    return infiniCclSuccess;
  });
}

infiniCclResult_t ReduceScatterV(const void* sendbuff, const size_t* sendcounts,
                                 const size_t* sdispls, void* recvbuff, size_t recvcount,
                                 DLDataType datatype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                 infiniCclStream_t stream) {
  constexpr const char* kCall = "reduce_scatter_v";
  CCLCHECK(RequireArrays(kCall, {sendcounts, sdispls}, "sendcounts and sdispls"));
  ncclDataType_t type;
  ncclRedOp_t nccl_op;
  CCLCHECK(ReductionTypeAndOp(datatype, op, kCall, &type, &nccl_op));
  Layout layout;  // for the rank, size and element width; reductions never move as bytes
  CCLCHECK(PrepareMovement(datatype, comm, kCall, &layout));
  nccl_op = SingleRankSafe(nccl_op, comm);
  const int rank = layout.rank;
  CCLCHECK(RequireOwnCount(kCall, "recvcount", recvcount, "sendcounts", sendcounts[rank], rank));
  // Block r reduces onto rank r; the other ranks' recvbuff is unused (NCCL
  // allows NULL there).
  return InNcclGroup(kCall, comm->nccl, [&] {
    for (int root = 0; root < layout.nranks; ++root) {
      CCLCHECK(Enqueued(
          ncclReduce(At(sendbuff, sdispls[root], layout), root == rank ? recvbuff : nullptr,
                     sendcounts[root], type, nccl_op, root, comm->nccl, ToCuda(stream)),
          kCall, comm->nccl));
    }
    return infiniCclSuccess;
  });
}

infiniCclResult_t Gather(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                         int root, infiniCclComm_t comm, infiniCclStream_t stream) {
  constexpr const char* kCall = "gather";
  Layout layout;
  CCLCHECK(PrepareMovement(datatype, comm, kCall, &layout));
  CCLCHECK(RequireRoot(kCall, root, layout.nranks));
  const int rank = layout.rank;
  if (rank != root) {
    return InNcclGroup(kCall, comm->nccl, [&] {
      return SendBlock(sendbuff, count, root, layout, comm, stream, kCall);
    });
  }
  const auto block = [&](int owner) { return static_cast<size_t>(owner) * count; };
  CCLCHECK(CopyOwnBlock(At(recvbuff, block(root), layout), sendbuff, count, layout, *comm, stream,
                        kCall));
  return InNcclGroup(kCall, comm->nccl, [&] {
    for (int peer = 0; peer < layout.nranks; ++peer) {
      if (peer == root) continue;
      CCLCHECK(
          RecvBlock(At(recvbuff, block(peer), layout), count, peer, layout, comm, stream, kCall));
    }
    return infiniCclSuccess;
  });
}

infiniCclResult_t Scatter(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                          int root, infiniCclComm_t comm, infiniCclStream_t stream) {
  constexpr const char* kCall = "scatter";
  Layout layout;
  CCLCHECK(PrepareMovement(datatype, comm, kCall, &layout));
  CCLCHECK(RequireRoot(kCall, root, layout.nranks));
  const int rank = layout.rank;
  if (rank != root) {
    return InNcclGroup(kCall, comm->nccl, [&] {
      return RecvBlock(recvbuff, count, root, layout, comm, stream, kCall);
    });
  }
  const auto block = [&](int owner) { return static_cast<size_t>(owner) * count; };
  CCLCHECK(CopyOwnBlock(recvbuff, At(sendbuff, block(root), layout), count, layout, *comm, stream,
                        kCall));
  return InNcclGroup(kCall, comm->nccl, [&] {
    for (int peer = 0; peer < layout.nranks; ++peer) {
      if (peer == root) continue;
      CCLCHECK(
          SendBlock(At(sendbuff, block(peer), layout), count, peer, layout, comm, stream, kCall));
    }
    return infiniCclSuccess;
  });
}

}  // namespace infini::ccl::nccl
