// The collectives on a communicator, with NCCL's semantics, on gloo's
// algorithms (and our own ring where gloo has none). Arguments are already
// validated; failures throw (gloo::IoException, PluginError) and are
// translated at the ABI boundary. All run synchronously on the caller's
// thread. count == 0 returns at once on every rank, so no rank waits.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>

#include "communicator.h"
#include "infini/ccl/plugin_abi.h"

namespace infini::gloo_backend {

void AllReduce(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
               DLDataType dtype, infiniCclRedOp_t op);
void Reduce(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
            DLDataType dtype, infiniCclRedOp_t op, int root);
void ReduceScatter(Communicator& comm, const void* sendbuff, void* recvbuff, size_t recvcount,
                   DLDataType dtype, infiniCclRedOp_t op);

void Broadcast(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
               DLDataType dtype, int root);
void AllGather(Communicator& comm, const void* sendbuff, void* recvbuff, size_t sendcount,
               DLDataType dtype);
void AllToAll(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
              DLDataType dtype);
void Barrier(Communicator& comm);
// Root's recvbuff[r*count ..) = rank r's sendbuff; recvbuff matters on the
// root only.
void Gather(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
            DLDataType dtype, int root);
// Rank r's recvbuff = root's sendbuff[r*count ..).
void Scatter(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
             DLDataType dtype, int root);

// The variable-size collectives. Count and displacement arrays hold one
// entry per rank, in elements; they are consistent across ranks (checked
// by the entry points where one rank can see it).
void AllToAllV(Communicator& comm, const void* sendbuff, const size_t* sendcounts,
               const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
               const size_t* rdispls, DLDataType dtype);
void AllGatherV(Communicator& comm, const void* sendbuff, size_t sendcount, void* recvbuff,
                const size_t* recvcounts, const size_t* rdispls, DLDataType dtype);
void ReduceScatterV(Communicator& comm, const void* sendbuff, const size_t* sendcounts,
                    const size_t* sdispls, void* recvbuff, DLDataType dtype, infiniCclRedOp_t op);

// All-gather of `bytes_per_rank` raw bytes (for comm_split's exchange).
void AllGatherBytes(Communicator& comm, const void* sendbuff, void* recvbuff,
                    size_t bytes_per_rank);

}  // namespace infini::gloo_backend
