// Grouping, collectives and point-to-point on NCCL.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::nccl {

infiniCclResult_t GroupStart();
infiniCclResult_t GroupEnd();

infiniCclResult_t AllReduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                            infiniCclRedOp_t op, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t Broadcast(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                            int root, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t Reduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                         infiniCclRedOp_t op, int root, infiniCclComm_t comm,
                         infiniCclStream_t stream);
infiniCclResult_t AllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            DLDataType datatype, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t ReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                DLDataType datatype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                infiniCclStream_t stream);
infiniCclResult_t Send(const void* sendbuff, size_t count, DLDataType datatype, int peer,
                       infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t Recv(void* recvbuff, size_t count, DLDataType datatype, int peer,
                       infiniCclComm_t comm, infiniCclStream_t stream);
// Grouped send/recv to and from every rank (NCCL's own all-to-all pattern).
infiniCclResult_t AllToAll(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                           infiniCclComm_t comm, infiniCclStream_t stream);
// A one-element all-reduce on the communicator's own device word.
infiniCclResult_t Barrier(infiniCclComm_t comm, infiniCclStream_t stream);

}  // namespace infini::ccl::nccl
