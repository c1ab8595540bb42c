#include "infini/parallel/rank.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "infini/parallel/errors.h"

namespace infini::parallel {
namespace {

DevicePlacement Placement(bool allow_sharing, bool isolated, std::string variable = "") {
  DevicePlacement placement;
  placement.allow_sharing = allow_sharing;
  placement.isolated = isolated;
  placement.visible_devices_variable = std::move(variable);
  return placement;
}

using ::testing::AllOf;
using ::testing::HasSubstr;

ProcessTopology Topology(int nnodes, int processes_per_node, int global_proc_rank) {
  ProcessTopology topology;
  topology.nnodes = nnodes;
  topology.processes_per_node = processes_per_node;
  topology.global_proc_rank = global_proc_rank;
  topology.node_rank = global_proc_rank / processes_per_node;
  topology.local_proc_rank = global_proc_rank % processes_per_node;
  return topology;
}

// The bug of InfiniTrain PR #184: world size was computed from per-node counts.
TEST(RankTest, ManyNodesWithOneProcessEachIsParallel) {
  for (int nnodes : {2, 3, 16}) {
    Rank rank(Topology(nnodes, 1, 1), 0, 1);
    EXPECT_EQ(rank.world_size(), nnodes);
    EXPECT_TRUE(rank.IsParallel()) << nnodes << " nodes";
    EXPECT_EQ(rank.global_rank(), 1);
    EXPECT_EQ(rank.local_device_index(), 0);
  }
}

TEST(RankTest, OneRankIsNotParallel) {
  Rank rank(Topology(1, 1, 0), 0, 1);
  EXPECT_FALSE(rank.IsParallel());
  EXPECT_TRUE(rank.IsMainRank());
  EXPECT_TRUE(rank.IsLastRank());
}

TEST(RankTest, ThreadsOfOneProcessAreParallel) {
  EXPECT_TRUE(Rank(Topology(1, 1, 0), 0, 2).IsParallel());
}

TEST(RankTest, GlobalRankCountsThreadsWithinProcessesWithinNodes) {
  // 2 nodes × 2 processes × 2 threads: process 3 is node 1, local process 1.
  Rank rank(Topology(2, 2, 3), 1, 2);
  EXPECT_EQ(rank.world_size(), 8);
  EXPECT_EQ(rank.global_rank(), 3 * 2 + 1);
  EXPECT_EQ(rank.node_rank(), 1);
  EXPECT_EQ(rank.local_world_size(), 4);
  EXPECT_EQ(rank.local_rank(), 1 * 2 + 1);
  EXPECT_EQ(rank.local_device_index(), 3);
  EXPECT_TRUE(rank.IsLastRank());
  EXPECT_FALSE(rank.IsMainRank());
}

TEST(RankTest, EveryLayoutOfEightRanksNumbersRanksOnce) {
  for (auto [nnodes, processes, threads] :
       {std::tuple{1, 8, 1}, {1, 4, 2}, {1, 2, 4}, {1, 1, 8}, {2, 2, 2}, {8, 1, 1}}) {
    std::vector<int> seen(8, 0);
    for (int process = 0; process < nnodes * processes; ++process) {
      for (int thread = 0; thread < threads; ++thread) {
        Rank rank(Topology(nnodes, processes, process), thread, threads);
        ASSERT_EQ(rank.world_size(), 8);
        ++seen.at(rank.global_rank());
        EXPECT_LT(rank.local_device_index(), processes * threads);
      }
    }
    EXPECT_EQ(seen, std::vector<int>(8, 1)) << nnodes << "x" << processes << "x" << threads;
  }
}

TEST(RankTest, RefusesBadThreadCounts) {
  EXPECT_THROW(Rank(Topology(1, 1, 0), 0, 0), ParallelConfigError);
  EXPECT_THROW(Rank(Topology(1, 1, 0), 2, 2), ParallelConfigError);
  EXPECT_THROW(Rank(Topology(1, 1, 0), -1, 2), ParallelConfigError);
}

TEST(RankTest, HostBackendsShareTheHost) {
  EXPECT_EQ(SelectDeviceIndex(Rank(Topology(1, 8, 7), 0, 1), kDLCPU, 1, {}), 0);
}

TEST(RankTest, DeviceIndexMustBeVisible) {
  Rank rank(Topology(1, 4, 2), 1, 2);  // local device 5 of 8
  EXPECT_EQ(SelectDeviceIndex(rank, kDLCUDA, 8, {}), 5);
  try {
    SelectDeviceIndex(rank, kDLCUDA, 4, Placement(false, false, "CUDA_VISIBLE_DEVICES='0,1,2,3'"));
    FAIL() << "expected ParallelConfigError";
  } catch (const ParallelConfigError& error) {
    EXPECT_THAT(error.what(),
                AllOf(HasSubstr("local device index 5"), HasSubstr("needs 8"),
                      HasSubstr("4 visible devices"), HasSubstr("CUDA_VISIBLE_DEVICES='0,1,2,3'"),
                      HasSubstr("INFINI_CCL_ALLOW_DEVICE_SHARING")));
  }
}

TEST(RankTest, DeviceSharingMapsRanksModuloVisibleDevices) {
  Rank rank(Topology(1, 4, 2), 1, 2);
  EXPECT_EQ(SelectDeviceIndex(rank, kDLCUDA, 4, Placement(true, false)), 1);
  EXPECT_EQ(SelectDeviceIndex(rank, kDLCUDA, 1, Placement(true, false)), 0);
}

// infini_run --isolate_devices: each process sees only its own devices, so
// its ranks index them by thread, and no device is shared.
TEST(RankTest, IsolatedDevicesAreIndexedByThread) {
  const DevicePlacement isolated = Placement(false, true);
  Rank process_rank(Topology(1, 8, 5), 0, 1);  // local process 5 of 8, one device visible
  EXPECT_EQ(SelectDeviceIndex(process_rank, kDLCUDA, 1, isolated), 0);
  EXPECT_FALSE(SharesDevice(process_rank, kDLCUDA, 1, true));
  EXPECT_TRUE(SharesDevice(process_rank, kDLCUDA, 1, false)) << "8 ranks, 1 device, not isolated";
  Rank thread_rank(Topology(1, 4, 2), 1, 2);  // thread 1 of local process 2
  EXPECT_EQ(SelectDeviceIndex(thread_rank, kDLCUDA, 2, isolated), 1);
  try {
    SelectDeviceIndex(thread_rank, kDLCUDA, 1, isolated);
    FAIL() << "expected ParallelConfigError";
  } catch (const ParallelConfigError& error) {
    EXPECT_THAT(error.what(),
                AllOf(HasSubstr("thread_rank 1 needs 2 devices in this process"),
                      HasSubstr("INFINI_CCL_DEVICES_ISOLATED=1"), HasSubstr("1 visible device")));
  }
}

TEST(RankTest, NoVisibleDeviceIsAnError) {
  EXPECT_THROW(SelectDeviceIndex(Rank(Topology(1, 1, 0), 0, 1), kDLCUDA, 0, Placement(true, false)),
               ParallelConfigError);
}

TEST(RankTest, RenumberedAfterALossKeepsWhereItRunsAndItsLaunchRank) {
  const Rank rank(Topology(1, 3, 2), 0, 1);
  const Rank renumbered = rank.Renumbered(1, 2);
  EXPECT_EQ(renumbered.global_rank(), 1);
  EXPECT_EQ(renumbered.world_size(), 2);
  EXPECT_EQ(renumbered.launch_global_rank(), 2);
  EXPECT_EQ(renumbered.local_proc_rank(), rank.local_proc_rank());
  EXPECT_TRUE(renumbered.renumbered());
  EXPECT_FALSE(rank.renumbered());
  EXPECT_EQ(renumbered.ToString().rfind("rank 1/2 (launched as 2, node", 0), 0u)
      << renumbered.ToString();
  EXPECT_THROW(rank.Renumbered(2, 2), ParallelConfigError);
}

}  // namespace
}  // namespace infini::parallel
