// The ABI v2 entry points of the gloo plugin, gathered into the exported
// table by plugin.cc. Each returns a result code and keeps a one-line
// explanation for get_last_error; none throws.
#pragma once

#include "infini/ccl/plugin_abi.h"

namespace infini::gloo_backend {

// ---- Communicators (comm_entries.cc) ----
infiniCclResult_t GetUniqueIdEntry(void* unique_id, const infiniCclBootstrap_t* bootstrap);
infiniCclResult_t CommInitRankEntry(infiniCclComm_t* comm, int nranks, const void* unique_id,
                                    int rank, const infiniCclConfig_t* config,
                                    const infiniCclBootstrap_t* bootstrap);
infiniCclResult_t CommInitRanksEntry(infiniCclComm_t* comms, int ncomms, const int* devices,
                                     const int* ranks, int nranks, const void* unique_id,
                                     const infiniCclConfig_t* config,
                                     const infiniCclBootstrap_t* bootstrap);
infiniCclResult_t CommSplitEntry(infiniCclComm_t comm, int color, int key, infiniCclComm_t* newcomm,
                                 const infiniCclConfig_t* config);
infiniCclResult_t CommShrinkEntry(infiniCclComm_t comm, const int32_t* excluded_ranks,
                                  int32_t excluded_count, const infiniCclConfig_t* config,
                                  int32_t flags, infiniCclComm_t* new_comm);
infiniCclResult_t CommRevokeEntry(infiniCclComm_t comm);
infiniCclResult_t CommDestroyEntry(infiniCclComm_t comm);
infiniCclResult_t CommAbortEntry(infiniCclComm_t comm);
infiniCclResult_t CommGetAsyncErrorEntry(infiniCclComm_t comm, infiniCclResult_t* async_error,
                                         const char** message);
infiniCclResult_t CommCountEntry(infiniCclComm_t comm, int* nranks);
infiniCclResult_t CommUserRankEntry(infiniCclComm_t comm, int* rank);
infiniCclResult_t GroupStartEntry();
infiniCclResult_t GroupEndEntry();

// ---- Collectives (collective_entries.cc) ----
infiniCclResult_t AllReduceEntry(const void* sendbuff, void* recvbuff, size_t count,
                                 DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                 infiniCclStream_t stream);
infiniCclResult_t BroadcastEntry(const void* sendbuff, void* recvbuff, size_t count,
                                 DLDataType dtype, int root, infiniCclComm_t comm,
                                 infiniCclStream_t stream);
infiniCclResult_t ReduceEntry(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                              infiniCclRedOp_t op, int root, infiniCclComm_t comm,
                              infiniCclStream_t stream);
infiniCclResult_t AllGatherEntry(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 DLDataType dtype, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t ReduceScatterEntry(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                     infiniCclStream_t stream);
infiniCclResult_t SendEntry(const void* sendbuff, size_t count, DLDataType dtype, int peer,
                            infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t RecvEntry(void* recvbuff, size_t count, DLDataType dtype, int peer,
                            infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t AllToAllEntry(const void* sendbuff, void* recvbuff, size_t count,
                                DLDataType dtype, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t BarrierEntry(infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t AllToAllVEntry(const void* sendbuff, const size_t* sendcounts,
                                 const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
                                 const size_t* rdispls, DLDataType dtype, infiniCclComm_t comm,
                                 infiniCclStream_t stream);
infiniCclResult_t AllGatherVEntry(const void* sendbuff, size_t sendcount, void* recvbuff,
                                  const size_t* recvcounts, const size_t* rdispls, DLDataType dtype,
                                  infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t ReduceScatterVEntry(const void* sendbuff, const size_t* sendcounts,
                                      const size_t* sdispls, void* recvbuff, size_t recvcount,
                                      DLDataType dtype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                      infiniCclStream_t stream);
infiniCclResult_t GatherEntry(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                              int root, infiniCclComm_t comm, infiniCclStream_t stream);
infiniCclResult_t ScatterEntry(const void* sendbuff, void* recvbuff, size_t count, DLDataType dtype,
                               int root, infiniCclComm_t comm, infiniCclStream_t stream);

}  // namespace infini::gloo_backend
