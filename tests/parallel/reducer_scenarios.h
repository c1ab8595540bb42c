// Checks of GradientReducer that one rank runs; the thread-rank tests and
// bin/gradient_reducer_check (under infini_run) share them. Each returns
// "" when the rank saw what it should, else one line saying what differed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "infini/parallel/context.h"
#include "infini/parallel/process_group.h"

namespace infini::parallel::testing {

// Random gradient sizes (one larger than a bucket), float32 and, when the
// backend averages it, bfloat16, tiny buckets: after a step marked in order
// and a step marked in a rank-dependent order, every gradient is bit for bit
// what a plain all_reduce of that gradient alone gives.
std::string CheckBucketsMatchPlainAllReduce(Context& context, ProcessGroup& group, uint64_t seed);

// SetSynchronize(false) for three micro-steps, then true: no operation
// reaches the group before the last micro-step (its sequence numbers say
// so), and the result is the average of the accumulated sums.
std::string CheckAccumulationCommunicatesOnlyOnTheLastMicroStep(Context& context,
                                                                ProcessGroup& group);

// The sequence number the group gives its next operation (by issuing a tiny
// all_reduce and reading its description). Collective over the group.
uint64_t NextSequenceNumber(Context& context, ProcessGroup& group);

}  // namespace infini::parallel::testing
