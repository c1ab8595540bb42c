// How big each buffer of a collective is, and how its time becomes
// bandwidth, in nccl-tests' terms (doc/PERFORMANCE.md of nccl-tests):
//   bytes S      all_reduce, broadcast, reduce, sendrecv: the buffer;
//                all_gather: the gathered (receive) buffer;
//                reduce_scatter: the full (send) buffer;
//                all_to_all: one rank's whole send buffer.
//   algbw = S / time;  busbw = algbw × factor, factor
//                all_reduce 2(n−1)/n; all_gather, reduce_scatter,
//                all_to_all (n−1)/n; broadcast, reduce, sendrecv 1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bench_options.h"

namespace infini::bench {

double BusBandwidthFactor(Collective collective, int world_size);

struct BufferPlan {
  int64_t chunk_elements = 0;  // per-rank share (all_gather, reduce_scatter, all_to_all)
  int64_t total_elements = 0;  // S in elements
  int64_t send_elements = 0;   // length of the send buffer (out-of-place)
  int64_t recv_elements = 0;   // length of the receive buffer (out-of-place)
  int64_t bytes = 0;           // S in bytes, what the counters use
};

// Rounds `requested_bytes` down to whole elements and, for the sharded
// collectives, to a multiple of world_size (at least one element per rank),
// as nccl-tests does.
BufferPlan PlanBuffers(Collective collective, int64_t requested_bytes, size_t element_bytes,
                       int world_size);

}  // namespace infini::bench
