#include "collectives.h"

#include <nccl.h>

#include <string>

#include "communicator.h"
#include "device_runtime.h"
#include "enqueue.h"
#include "errors.h"
#include "types.h"

namespace infini::ccl::nccl {
namespace {

// Type, operator and communicator checks of every reducing collective.
inline infiniCclResult_t PrepareReduction(DLDataType datatype, infiniCclRedOp_t op,
                                          infiniCclComm_t comm, const char* call,
                                          ncclDataType_t* type, ncclRedOp_t* nccl_op) {
  CCLCHECK(ReductionTypeAndOp(datatype, op, call, type, nccl_op));
  CCLCHECK(RequireComm(comm, call));
  *nccl_op = SingleRankSafe(*nccl_op, comm);
  return infiniCclSuccess;
}

// Type and communicator checks of every collective that only moves data; a
// type NCCL cannot reduce travels as bytes, so `count` may be rescaled.
inline infiniCclResult_t PrepareMovement(DLDataType datatype, infiniCclComm_t comm,
                                         const char* call, ncclDataType_t* type, size_t* count) {
  CCLCHECK(MovementType(datatype, call, type, count));
  return RequireComm(comm, call);
}

}  // namespace

infiniCclResult_t GroupStart() {
  return CheckNccl(ncclGroupStart(), "group_start: ncclGroupStart");
}

infiniCclResult_t GroupEnd() { return CheckNccl(ncclGroupEnd(), "group_end: ncclGroupEnd"); }

infiniCclResult_t AllReduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                            infiniCclRedOp_t op, infiniCclComm_t comm, infiniCclStream_t stream) {
  constexpr const char* kCall = "all_reduce";
  ncclDataType_t type;
  ncclRedOp_t nccl_op;
  CCLCHECK(PrepareReduction(datatype, op, comm, kCall, &type, &nccl_op));
  return Enqueued(
      ncclAllReduce(sendbuff, recvbuff, count, type, nccl_op, comm->nccl, ToCuda(stream)), kCall,
      comm->nccl);
}

infiniCclResult_t Broadcast(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                            int root, infiniCclComm_t comm, infiniCclStream_t stream) {
  constexpr const char* kCall = "broadcast";
  ncclDataType_t type;
  CCLCHECK(PrepareMovement(datatype, comm, kCall, &type, &count));
  return Enqueued(ncclBroadcast(sendbuff, recvbuff, count, type, root, comm->nccl, ToCuda(stream)),
                  kCall, comm->nccl);
}

infiniCclResult_t Reduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                         infiniCclRedOp_t op, int root, infiniCclComm_t comm,
                         infiniCclStream_t stream) {
  constexpr const char* kCall = "reduce";
  ncclDataType_t type;
  ncclRedOp_t nccl_op;
  CCLCHECK(PrepareReduction(datatype, op, comm, kCall, &type, &nccl_op));
  return Enqueued(
      ncclReduce(sendbuff, recvbuff, count, type, nccl_op, root, comm->nccl, ToCuda(stream)), kCall,
      comm->nccl);
}

infiniCclResult_t AllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            DLDataType datatype, infiniCclComm_t comm, infiniCclStream_t stream) {
  constexpr const char* kCall = "all_gather";
  ncclDataType_t type;
  CCLCHECK(PrepareMovement(datatype, comm, kCall, &type, &sendcount));
  return Enqueued(ncclAllGather(sendbuff, recvbuff, sendcount, type, comm->nccl, ToCuda(stream)),
                  kCall, comm->nccl);
}

infiniCclResult_t ReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                DLDataType datatype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                infiniCclStream_t stream) {
  constexpr const char* kCall = "reduce_scatter";
  ncclDataType_t type;
  ncclRedOp_t nccl_op;
  CCLCHECK(PrepareReduction(datatype, op, comm, kCall, &type, &nccl_op));
  return Enqueued(
      ncclReduceScatter(sendbuff, recvbuff, recvcount, type, nccl_op, comm->nccl, ToCuda(stream)),
      kCall, comm->nccl);
}

infiniCclResult_t Send(const void* sendbuff, size_t count, DLDataType datatype, int peer,
                       infiniCclComm_t comm, infiniCclStream_t stream) {
  constexpr const char* kCall = "send";
  ncclDataType_t type;
  CCLCHECK(PrepareMovement(datatype, comm, kCall, &type, &count));
  return Enqueued(ncclSend(sendbuff, count, type, peer, comm->nccl, ToCuda(stream)), kCall,
                  comm->nccl);
}

infiniCclResult_t Recv(void* recvbuff, size_t count, DLDataType datatype, int peer,
                       infiniCclComm_t comm, infiniCclStream_t stream) {
  constexpr const char* kCall = "recv";
  ncclDataType_t type;
  CCLCHECK(PrepareMovement(datatype, comm, kCall, &type, &count));
  return Enqueued(ncclRecv(recvbuff, count, type, peer, comm->nccl, ToCuda(stream)), kCall,
                  comm->nccl);
}

infiniCclResult_t AllToAll(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                           infiniCclComm_t comm, infiniCclStream_t stream) {
  constexpr const char* kCall = "all_to_all";
  ncclDataType_t type;
  CCLCHECK(RequireComm(comm, kCall));
  int nranks = 0;
  CCLCHECK(CommCount(comm, &nranks));
  const size_t block_bytes = count * ElementBytes(datatype);  // before count becomes NCCL's
  CCLCHECK(MovementType(datatype, kCall, &type, &count));
  if (sendbuff == recvbuff && count > 0 && nranks > 1) {
    // Blocks are exchanged concurrently, so in place a block would be
    // overwritten before it is sent.
    return Fail(infiniCclInvalidArgument,
                "all_to_all: in-place (sendbuff == recvbuff) is not supported by the nccl backend; "
                "use a separate receive buffer");
  }
  cudaStream_t cuda_stream = ToCuda(stream);
  const char* send_bytes = static_cast<const char*>(sendbuff);
  char* recv_bytes = static_cast<char*>(recvbuff);
  return InNcclGroup(kCall, comm->nccl, [&] {
    for (int peer = 0; peer < nranks; ++peer) {
      const size_t offset = static_cast<size_t>(peer) * block_bytes;
      CCLCHECK(Enqueued(ncclSend(send_bytes + offset, count, type, peer, comm->nccl, cuda_stream),
                        kCall, comm->nccl));
      CCLCHECK(Enqueued(ncclRecv(recv_bytes + offset, count, type, peer, comm->nccl, cuda_stream),
                        kCall, comm->nccl));
    }
    return infiniCclSuccess;
  });
}

infiniCclResult_t Barrier(infiniCclComm_t comm, infiniCclStream_t stream) {
  constexpr const char* kCall = "barrier";
  CCLCHECK(RequireComm(comm, kCall));
  return Enqueued(ncclAllReduce(comm->barrier_word, comm->barrier_word, 1, ncclUint32, ncclSum,
                                comm->nccl, ToCuda(stream)),
                  kCall, comm->nccl);
}

}  // namespace infini::ccl::nccl
