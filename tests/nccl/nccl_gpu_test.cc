// The nccl backend on real GPUs (label "gpu"): every collective in both
// layouts against a host reference, p2p, splits, graphs, non-blocking
// communicators, abort, and the refusal of two ranks on one GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/ccl.h"
#include "rank_harness.h"
#include "scenarios.h"

namespace infini::ccl::nccl_test {
namespace {

using std::chrono::steady_clock;

constexpr int kRanksNeeded = 2;

// All visible devices, at least two (else the test is skipped).
#define REQUIRE_DEVICES(needed)                 \
  const int visible_devices = VisibleDevices(); \
  if (visible_devices < (needed)) GTEST_SKIP() << DevicesNeeded(needed)

void ExpectNoFailures(const std::vector<std::vector<std::string>>& per_rank) {
  for (size_t rank = 0; rank < per_rank.size(); ++rank) {
    EXPECT_TRUE(per_rank[rank].empty()) << "rank " << rank << " failed:\n"
                                        << Describe(per_rank[rank]);
  }
}

void RunInThreads(const std::string& scenario, int world_size) {
  ExpectNoFailures(
      RunThreadRanks(world_size, [&](RankContext& context) { RunScenario(scenario, context); }));
}

TEST(NcclThreadRanks, CollectivesMatchHostReference) {
  REQUIRE_DEVICES(kRanksNeeded);
  RunInThreads("collectives", visible_devices);
}

TEST(NcclThreadRanks, GroupedCollectivesMatchHostReference) {
  REQUIRE_DEVICES(kRanksNeeded);
  RunInThreads("grouped", visible_devices);
}

TEST(NcclThreadRanks, P2pRingInGroupDeliversNeighbourData) {
  REQUIRE_DEVICES(kRanksNeeded);
  RunInThreads("p2p_ring", visible_devices);
}

TEST(NcclThreadRanks, P2pPairsExchangeOutsideGroups) {
  REQUIRE_DEVICES(kRanksNeeded);
  RunInThreads("p2p_pairs", visible_devices);
}

TEST(NcclThreadRanks, SplitCommunicatorsHaveExpectedMembers) {
  REQUIRE_DEVICES(kRanksNeeded);
  RunInThreads("split", visible_devices);
}

TEST(NcclThreadRanks, GraphReplayedAllReduceMatchesHostReference) {
  REQUIRE_DEVICES(kRanksNeeded);
  RunInThreads("graph", visible_devices);
}

TEST(NcclThreadRanks, LargeAllReduceMatchesHostReference) {
  REQUIRE_DEVICES(kRanksNeeded);
  RunInThreads("large", visible_devices);
}

TEST(NcclThreadRanks, BarrierWaitsForTheLastRank) {
  REQUIRE_DEVICES(kRanksNeeded);
  std::barrier ready(visible_devices);
  ExpectNoFailures(RunThreadRanks(visible_devices, [&](RankContext& context) {
    // NCCL connects peers at a communicator's first collective, blocking the
    // host call until every rank arrives; connect first so that the barrier
    // below is enqueued at once and its completion is what is observed.
    context.backend->Barrier(*context.comm, *context.stream);
    context.Wait("first barrier");
    ready.arrive_and_wait();
    if (context.rank == context.world_size - 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
    }
    context.backend->Barrier(*context.comm, *context.stream);
    if (context.rank == 0) {
      Event entered(context.backend);
      entered.Record(*context.stream);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      context.Expect(!entered.Query(), "barrier completed before the last rank entered it");
    }
    context.Wait("barrier");
  }));
}

TEST(NcclProcessRanks, EveryScenarioPassesWithOneProcessPerGpu) {
  REQUIRE_DEVICES(kRanksNeeded);
  const std::vector<std::string> failures =
      RunProcessRanks(visible_devices, "all", std::chrono::seconds(400));
  EXPECT_TRUE(failures.empty()) << Describe(failures) << "(worker output is above)";
}

// ---- Raw ABI: non-blocking communicators, abort, device sharing ---------

struct RawComm {
  infiniCclComm_t handle = nullptr;
  infiniCclResult_t init_result = infiniCclSuccess;
};

// Creates a non-blocking communicator and polls until it is ready.
infiniCclResult_t InitNonBlocking(const Backend& backend, int world_size, const UniqueId& id,
                                  int rank, infiniCclComm_t* comm) {
  const auto& plugin = backend.plugin();
  infiniCclConfig_t config{};
  config.struct_size = sizeof(config);
  config.blocking = 0;
  config.comm_name = "nonblocking_test";
  infiniCclResult_t result = plugin.comm_init_rank(comm, world_size, id.raw(), rank, &config);
  if (result != infiniCclSuccess && result != infiniCclInProgress) return result;
  const auto deadline = steady_clock::now() + kCollectiveDeadline;
  infiniCclResult_t state = infiniCclInProgress;
  while (state == infiniCclInProgress && steady_clock::now() < deadline) {
    const infiniCclResult_t polled = plugin.comm_get_async_error(*comm, &state);
    if (polled != infiniCclSuccess) return polled;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

TEST(NcclNonBlocking, InitCanBePolledUntilReadyThenAborted) {
  REQUIRE_DEVICES(kRanksNeeded);
  auto backend = Backend::Load("nccl");
  const UniqueId id = backend->GetUniqueId();
  std::vector<std::string> failures(static_cast<size_t>(visible_devices));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < visible_devices; ++rank) {
    ranks.emplace_back([&, rank] {
      const auto& plugin = backend->plugin();
      backend->SetDevice(rank);
      infiniCclComm_t comm = nullptr;
      const infiniCclResult_t ready = InitNonBlocking(*backend, visible_devices, id, rank, &comm);
      int count = 0;
      int user_rank = -1;
      if (ready != infiniCclSuccess) {
        failures[rank] = std::string("init: ") + ResultName(ready) + ": " + plugin.get_last_error();
      } else if (plugin.comm_count(comm, &count) != infiniCclSuccess || count != visible_devices ||
                 plugin.comm_user_rank(comm, &user_rank) != infiniCclSuccess || user_rank != rank) {
        failures[rank] = "comm_count/comm_user_rank disagree with init: " + std::to_string(count) +
                         ", " + std::to_string(user_rank);
      }
      if (comm != nullptr && plugin.comm_abort(comm) != infiniCclSuccess) {
        failures[rank] += std::string(" abort: ") + plugin.get_last_error();
      }
    });
  }
  for (auto& rank : ranks) rank.join();
  for (size_t rank = 0; rank < failures.size(); ++rank) {
    EXPECT_EQ(failures[rank], "") << "rank " << rank;
  }
}

// The watchdog path: rank 0 enters an all_reduce that the last rank skips.
// Rank 0 sees it not completing, aborts, and the abort releases its stream.
TEST(NcclNonBlocking, RankWhosePeerSkipsACollectiveIsDetectedAndAborted) {
  REQUIRE_DEVICES(kRanksNeeded);
  auto backend = Backend::Load("nccl");
  const UniqueId id = backend->GetUniqueId();
  const int world = visible_devices;
  std::vector<std::string> failures(static_cast<size_t>(world));
  std::barrier ready(world);
  std::atomic<bool> rank0_done{false};
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      const auto& plugin = backend->plugin();
      std::string& failure = failures[rank];
      backend->SetDevice(rank);
      infiniCclComm_t comm = nullptr;
      const infiniCclResult_t init = InitNonBlocking(*backend, world, id, rank, &comm);
      ready.arrive_and_wait();
      if (init != infiniCclSuccess) {
        failure = std::string("init: ") + plugin.get_last_error();
        if (comm != nullptr) plugin.comm_abort(comm);
        return;
      }
      // One collective that every rank joins: NCCL connects peers lazily, and
      // the hang under test is a collective's, not the connection's.
      {
        Stream warmup_stream(backend);
        DeviceBuffer warmup(backend, sizeof(float));
        infiniCclResult_t state =
            plugin.all_reduce(warmup.data(), warmup.data(), 1, DLDataType{kDLFloat, 32, 1},
                              infiniCclSum, comm, warmup_stream.handle());
        const auto deadline = steady_clock::now() + std::chrono::seconds(60);
        while (state == infiniCclInProgress && steady_clock::now() < deadline) {
          plugin.comm_get_async_error(comm, &state);
          std::this_thread::yield();
        }
        if (state == infiniCclSuccess) warmup_stream.Synchronize();
        if (state != infiniCclSuccess) failure = "warm-up all_reduce did not complete";
      }
      if (rank != 0) {
        // Skip the collective; leave once rank 0 has given up on it.
        const auto deadline = steady_clock::now() + std::chrono::seconds(120);
        while (!rank0_done && steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        plugin.comm_abort(comm);
        return;
      }
      Stream stream(backend);
      DeviceBuffer buffer(backend, 1024 * sizeof(float));
      infiniCclResult_t enqueued =
          plugin.all_reduce(buffer.data(), buffer.data(), 1024, DLDataType{kDLFloat, 32, 1},
                            infiniCclSum, comm, stream.handle());
      // A non-blocking communicator may report the enqueue as in progress.
      infiniCclResult_t state = enqueued;
      const auto enqueue_deadline = steady_clock::now() + std::chrono::seconds(30);
      while (state == infiniCclInProgress && steady_clock::now() < enqueue_deadline) {
        plugin.comm_get_async_error(comm, &state);
        std::this_thread::yield();
      }
      if (state == infiniCclInProgress) {
        failure = "all_reduce enqueue still in progress after 30 s";
      } else if (state != infiniCclSuccess) {
        failure = std::string("all_reduce: ") + plugin.get_last_error();
      } else {
        Event finished(backend);
        finished.Record(stream);
        std::this_thread::sleep_for(std::chrono::seconds(2));
        if (finished.Query()) failure = "an all_reduce completed with a rank missing";
        const auto abort_started = steady_clock::now();
        if (plugin.comm_abort(comm) != infiniCclSuccess) {
          failure += std::string(" abort: ") + plugin.get_last_error();
        }
        comm = nullptr;
        // After the abort the stream must drain (the kernel gives up).
        while (!finished.Query() &&
               steady_clock::now() - abort_started < std::chrono::seconds(60)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (!finished.Query()) failure += " the aborted all_reduce still holds the stream";
      }
      rank0_done = true;
      if (comm != nullptr) plugin.comm_abort(comm);
    });
  }
  for (auto& rank : ranks) rank.join();
  for (size_t rank = 0; rank < failures.size(); ++rank) {
    EXPECT_EQ(failures[rank], "") << "rank " << rank;
  }
}

// NCCL cannot run two ranks on one GPU; the plugin says so in one line.
TEST(NcclDeviceSharing, TwoRanksOnOneGpuAreRefusedWithClearMessage) {
  REQUIRE_DEVICES(1);
  auto backend = Backend::Load("nccl");
  const UniqueId id = backend->GetUniqueId();
  std::vector<std::string> messages(2);
  std::vector<infiniCclResult_t> codes(2, infiniCclSuccess);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      CommConfig config;
      config.allow_device_sharing = true;
      try {
        backend->SetDevice(0);
        Communicator comm = backend->CommInitRank(2, id, rank, config);
        comm.Abort();
      } catch (const Error& error) {
        codes[rank] = error.code();
        messages[rank] = error.what();
      }
    });
  }
  for (auto& rank : ranks) rank.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(codes[rank], infiniCclInvalidUsage) << "rank " << rank << ": " << messages[rank];
    EXPECT_NE(messages[rank].find("one GPU"), std::string::npos) << messages[rank];
  }
}

}  // namespace
}  // namespace infini::ccl::nccl_test

int main(int argc, char** argv) {
  if (std::getenv("INFINI_NCCL_TEST_WORKER") != nullptr) {
    return infini::ccl::nccl_test::RunWorker(
        [](const std::string& scenario, infini::ccl::nccl_test::RankContext& context) {
          infini::ccl::nccl_test::RunScenario(scenario, context);
        });
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
