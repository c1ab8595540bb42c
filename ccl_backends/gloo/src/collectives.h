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

// All-gather of `bytes_per_rank` raw bytes (for comm_split's exchange).
void AllGatherBytes(Communicator& comm, const void* sendbuff, void* recvbuff,
                    size_t bytes_per_rank);

}  // namespace infini::gloo_backend
