// What every rank runs, in either layout: collectives checked against a
// reference computed on the host.
#pragma once

#include <string>
#include <vector>

#include "rank_harness.h"

namespace infini::ccl::nccl_test {

// Every collective x reducible dtype x op (reductions) x count {0, 1, odd}
// x in-place/out-of-place, against the host reference.
void CollectivesMatchHostReference(RankContext& context);
// all_reduce, all_gather and broadcast issued together inside one group.
void GroupedCollectivesMatchHostReference(RankContext& context);
// Each rank sends to the next and receives from the previous, in a group.
void P2pRingDeliversNeighbourData(RankContext& context);
// Pairs (0,1), (2,3)... exchange with send/recv outside any group.
void P2pPairsExchangeOutsideGroups(RankContext& context);
// Reordered, partitioned and partial (color < 0) splits.
void SplitCommunicatorsHaveExpectedMembers(RankContext& context);
void BarrierCompletes(RankContext& context);
// An all_reduce captured into a graph and replayed accumulates as expected.
void GraphReplayedAllReduceMatchesHostReference(RankContext& context);
// One float32 sum all_reduce of 256 MiB.
void LargeAllReduceMatchesHostReference(RankContext& context);
// all_to_all_v, all_gather_v, reduce_scatter_v (uneven and empty blocks, gaps
// between blocks left untouched), gather and scatter (counts 0, 1, odd), in
// and out of place, against the host reference.
void VariableCollectivesMatchHostReference(RankContext& context);

// Names accepted by RunScenario ("all" runs every one in order; "a,b" runs
// a then b).
const std::vector<std::string>& ScenarioNames();
void RunScenario(const std::string& name, RankContext& context);

}  // namespace infini::ccl::nccl_test
