#include "collective_plan.h"

#include <gtest/gtest.h>

namespace infini::bench {
namespace {

TEST(CollectivePlan, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kReduceScatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kReduce, 8), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kSend, 8), 1.0);
}

TEST(CollectivePlan, AllGatherBytesAreTheGatheredBuffer) {
  const BufferPlan plan = PlanBuffers(Collective::kAllGather, 1024, 4, 4);
  EXPECT_EQ(plan.chunk_elements, 64);
  EXPECT_EQ(plan.send_elements, 64);
  EXPECT_EQ(plan.recv_elements, 256);
  EXPECT_EQ(plan.bytes, 1024);
}

TEST(CollectivePlan, ReduceScatterBytesAreTheFullSendBuffer) {
  const BufferPlan plan = PlanBuffers(Collective::kReduceScatter, 1024, 4, 4);
  EXPECT_EQ(plan.send_elements, 256);
  EXPECT_EQ(plan.recv_elements, 64);
  EXPECT_EQ(plan.bytes, 1024);
}

TEST(CollectivePlan, ShardedSizesRoundToWholeElementsPerRank) {
  // 8 bytes of float32 over 8 ranks: one element each, 32 bytes in all.
  const BufferPlan tiny = PlanBuffers(Collective::kAllToAll, 8, 4, 8);
  EXPECT_EQ(tiny.chunk_elements, 1);
  EXPECT_EQ(tiny.bytes, 32);
  // 100 bytes of float32 over 3 ranks: 25 elements → 8 per rank.
  const BufferPlan odd = PlanBuffers(Collective::kAllGather, 100, 4, 3);
  EXPECT_EQ(odd.total_elements, 24);
  EXPECT_EQ(odd.bytes, 96);
}

TEST(CollectivePlan, UnshardedCollectivesUseTheWholeBuffer) {
  for (Collective collective :
       {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce, Collective::kSend}) {
    const BufferPlan plan = PlanBuffers(collective, 4096, 2, 8);
    EXPECT_EQ(plan.send_elements, 2048);
    EXPECT_EQ(plan.recv_elements, 2048);
    EXPECT_EQ(plan.bytes, 4096);
  }
}

}  // namespace
}  // namespace infini::bench
