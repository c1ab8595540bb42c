// The arena test device's own CCL ("island" collectives): all_reduce,
// reduce and broadcast among the processes of one arena build on this
// machine, over a POSIX shared-memory segment named by the communicator's
// unique id. It stands for a vendor's library (NCCL, HCCL ...) in CI, so
// that a staged communicator can reduce inside an island of ranks of one
// device plugin without the host backend. Buffers are host addresses here:
// the plugin resolves its device pointers before calling in.
#pragma once

#include <cstddef>
#include <string>

#include "infini/ccl/plugin_abi.h"

namespace arena_island {

struct Comm;

constexpr size_t kUniqueIdBytes = 8;

// Random bytes: the segment's name among the communicators of this machine.
void MakeUniqueId(void* unique_id);

// Joins (creating when first) the segment of `unique_id` for `device_name`
// and waits until all `nranks` ranks have joined. *why says a failure.
infiniCclResult_t Join(const char* device_name, const void* unique_id, int nranks, int rank,
                       Comm** comm, std::string* why);
void Leave(Comm* comm);
// Ends the waits of a call in another thread, which then fails; the
// segment stays mapped (a test plugin may leak what a waiter still reads).
void Abort(Comm* comm);
int RankOf(const Comm* comm);
int SizeOf(const Comm* comm);

enum class Kind { kAllReduce, kReduce, kBroadcast };
// One collective, synchronously. `send` is read on every rank that
// contributes (all for reductions, the root for broadcast); `recv` is
// written on every rank (all_reduce, broadcast) or the root (reduce). They
// may be the same buffer.
infiniCclResult_t Run(Comm* comm, Kind kind, const char* send, char* recv, size_t count,
                      DLDataType dtype, infiniCclRedOp_t op, int root, std::string* why);

// Whether Run does `kind` on `dtype` with `op`.
bool Supports(Kind kind, DLDataType dtype, infiniCclRedOp_t op);

}  // namespace arena_island
