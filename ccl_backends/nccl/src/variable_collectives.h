// The optional v-collectives, gather and scatter, on NCCL's grouped
// point-to-point calls (reduce_scatter_v on grouped ncclReduce calls, one per
// root). The block a rank keeps for itself is copied on its stream with
// cudaMemcpyAsync, cheaper than a send to itself.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::nccl {

infiniCclResult_t AllToAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                            void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                            DLDataType datatype, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t AllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff,
                             const size_t* recvcounts, const size_t* rdispls, DLDataType datatype,
                             infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t ReduceScatterV(const void* sendbuff, const size_t* sendcounts,
                                 const size_t* sdispls, void* recvbuff, size_t recvcount,
                                 DLDataType datatype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                 infiniCclStream_t stream);
infiniCclResult_t Gather(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                         int root, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t Scatter(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                          int root, infiniCclComm_t comm, infiniCclStream_t stream);

}  // namespace infini::ccl::nccl
