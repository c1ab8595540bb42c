// nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md of nccl-tests):
// busbw = algbw × factor, where algbw = S / time and S is the collective's
// size in nccl-tests' terms (all_gather: the gathered buffer; reduce_scatter
// and all_to_all: the full send buffer; the others: the buffer). The one
// definition: bench/ and the trace's metrics (docs/tracing.md) read it.
#pragma once

#include "infini/ccl/collectives.h"

namespace infini::ccl {

constexpr double BusBandwidthFactor(Collective collective, int world_size) {
  const double ranks = world_size > 0 ? world_size : 1;
  switch (collective) {
    case Collective::kAllReduce:
      return 2.0 * (ranks - 1) / ranks;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return (ranks - 1) / ranks;
    default:  // broadcast, reduce, the send/recv ring, and the rest
      return 1.0;
  }
}

}  // namespace infini::ccl
