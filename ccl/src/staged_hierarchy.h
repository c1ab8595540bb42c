// Hierarchical all_reduce of a staged communicator (issue 33 item 3): ranks
// of one "island" (one host, one device plugin that has collectives of its
// own, a vendor CCL) reduce to their leader with that plugin's communicator
// on the device; the leaders (and every rank that is an island of one: a
// host rank, a device without a CCL) all-reduce the islands' results through
// the host over the transport; each island broadcasts the result back with
// its own CCL. Only the leaders' bytes cross the host.
//
// Chosen per call by size: all_reduce of at least
// INFINI_CCL_STAGED_HIERARCHY_BYTES (rank 0's value; `never` keeps every
// call flat; unset: `never` when all ranks are on one host and flat staging
// shares memory there, else every size) when some island has two ranks or
// more and every island's CCL does reduce and broadcast of the type and
// operator.
// Avg is a sum inside the islands, divided on the leaders' host, so only
// the types the host divides (float32, float64) average hierarchically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::internal::staged {

struct StagedComm;

struct Islands {
  // This rank's island's communicator of the device plugin; NULL for an
  // island of one.
  infiniCclComm_t island = nullptr;
  bool island_aborted = false;  // by UnblockIslands: freed already
  // The leaders' staged communicator over the transport; NULL on a rank
  // that is not its island's leader.
  StagedComm* leaders = nullptr;
  int nranks = 0;         // the whole communicator's ranks
  int island_count = 0;   // islands, ones of one rank included
  int64_t threshold = 0;  // bytes from which all_reduce is hierarchical
  // A bit per (type, operator) that every island of two or more does.
  std::vector<uint8_t> supported;
};

// Finds the communicator's islands and makes their communicators, or
// leaves it flat: collective over the transport, when the communicator is
// made (so that no collective call waits for it); a failure is the
// communicator's creation's.
infiniCclResult_t SettleIslands(StagedComm& comm);

// Whether this all_reduce of `count` elements goes through the islands.
infiniCclResult_t ChooseIslands(StagedComm& comm, size_t count, DLDataType dtype,
                                infiniCclRedOp_t op, bool* chosen);

// The hierarchical all_reduce, stream-ordered like the flat one.
infiniCclResult_t IslandAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                  DLDataType dtype, infiniCclRedOp_t op, StagedComm& comm,
                                  infiniCclStream_t stream);

// comm_abort's first half, from any thread: aborts the island's and the
// leaders' communicators, so a hierarchical call in flight fails instead of
// waiting. Nothing is freed.
void UnblockIslands(StagedComm& comm);
// The second half, or comm_destroy's, once no call is in flight (under
// comm.calls): frees what is left of them.
void FreeIslands(StagedComm& comm, bool abort);

// staged_collectives.cc: the flat chunked all_reduce over `comm`'s
// transport, the host result divided by `divisor` when it is above 1 (an
// average whose sum the islands made).
infiniCclResult_t TransportAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                     DLDataType dtype, infiniCclRedOp_t op, int divisor,
                                     StagedComm* comm, infiniCclStream_t stream);

}  // namespace infini::ccl::internal::staged
