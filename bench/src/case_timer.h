// How a case is timed (docs/performance.md, "How ccl_bench times"):
//   back_to_back (nccl-tests', the default): a barrier, then --iters
//     iterations queued one after another between a start and a stop
//     event, nothing recorded between them; the time per launch is that
//     span / (iters × agg_iters). Then the same iterations again with an
//     event recorded on the stream after each: it gives the iteration's own
//     time (event i − event i−1) with no barrier or host wait between
//     iterations, for the tail columns only (the events' host cost stays out
//     of the time column, as in nccl-tests): on a device the events are timestamps the
//     stream takes as it passes them; on a host backend, whose collectives
//     return when done, they are host timestamps of each completion. The
//     per-iteration times are maxed over ranks (one float64 all-reduce after
//     the loop) for the tail columns.
// Under --split the barrier is the world's (every group starts together,
// as nccl-tests' groups run at once) and the reductions are the group's.
//   per_iteration (-z 1): a barrier and events around each iteration, its
//     time maxed over ranks; adds the barrier's tail to small messages.
//   graph (-G N): the --iters iterations captured once as a graph, replayed
//     N times between the events; a sample is one replay / iters.
//   cpu_time (-C): the span on the host clock, the stream drained at both
//     ends, instead of the events.
#pragma once

#include <vector>

#include "bench_options.h"
#include "bench_world.h"
#include "collective_case.h"

namespace infini::bench {

struct CaseTiming {
  double seconds_per_launch = 0;     // reduced over ranks as --average says
  std::vector<double> iteration_us;  // per launch, max over ranks; may be empty
};

// More per-iteration samples than this are not kept (no events recorded,
// the tail columns say N/A): a billion iterations would need a billion
// events.
constexpr int64_t kMaxIterationSamples = 100'000;

// Runs the timed loop of `one_case` on this rank; every rank calls it.
CaseTiming TimeCase(const RankResources& rank, const CollectiveCase& one_case,
                    const BenchOptions& options);

// Each element of `values` reduced over `communicator`'s ranks (one
// float64 all-reduce of the whole list on the rank's stream).
std::vector<double> ReduceListOverRanks(const RankResources& rank,
                                        const ccl::Communicator& communicator,
                                        std::vector<double> values, ccl::ReduceOp op);

// One iteration: the case's launch, or --agg_iters launches in one group
// where the backend has group entries.
void LaunchIteration(const RankResources& rank, const CollectiveCase& one_case,
                     int64_t aggregated_launches);

}  // namespace infini::bench
