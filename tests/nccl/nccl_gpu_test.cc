// The nccl backend on real GPUs (label "gpu"): every collective in every
// layout (threads, processes, communicators made one per thread or several
// per call) against a host reference, v-collectives, p2p, splits, graphs,
// vendor options, non-blocking communicators, async errors with text, abort,
// capability refusals, and the refusal of two ranks on one GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/ccl/dtype.h"
#include "infini/ccl/plugin_table.h"
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

void RunInThreads(const std::string& scenario, int world_size, const CommConfig& config = {},
                  InitMode mode = InitMode::kPerThread) {
  ExpectNoFailures(RunThreadRanks(
      world_size, [&](RankContext& context) { RunScenario(scenario, context); }, config, mode));
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

TEST(NcclThreadRanks, VariableCollectivesGatherAndScatterMatchHostReference) {
  REQUIRE_DEVICES(kRanksNeeded);
  RunInThreads("variable", visible_devices);
}

// ---- Several ranks per init call (comm_init_ranks) -----------------------

TEST(NcclInitAll, OneProcessDrivesEveryDeviceAfterCommInitAll) {
  REQUIRE_DEVICES(kRanksNeeded);
  RunInThreads("grouped,p2p_ring,split,variable", visible_devices, {}, InitMode::kInitAll);
}

TEST(NcclInitRanks, OneProcessDrivesEveryDeviceAfterCommInitRanks) {
  REQUIRE_DEVICES(kRanksNeeded);
  RunInThreads("collectives,grouped,p2p_pairs,barrier,variable", visible_devices, {},
               InitMode::kInitRanks);
}

// Ranks in reverse device order: each communicator's collectives run on a
// stream of the device it was given (NCCL cannot launch on another device's
// stream), and the caller's current device is what it was.
TEST(NcclInitRanks, RanksLandOnTheGivenDevicesAndTheCallersDeviceIsKept) {
  REQUIRE_DEVICES(kRanksNeeded);
  auto backend = Backend::Load("nccl");
  std::vector<int> ranks, devices;
  for (int rank = 0; rank < visible_devices; ++rank) {
    ranks.push_back(rank);
    devices.push_back(visible_devices - 1 - rank);
  }
  backend->SetDevice(1);
  std::vector<Communicator> comms =
      backend->CommInitRanks(visible_devices, backend->GetUniqueId(), ranks, devices);
  EXPECT_EQ(backend->GetDevice(), 1) << "comm_init_ranks changed the caller's current device";
  ASSERT_EQ(comms.size(), ranks.size());
  for (size_t index = 0; index < comms.size(); ++index) {
    EXPECT_EQ(comms[index].rank(), ranks[index]);
    EXPECT_EQ(comms[index].world_size(), visible_devices);
  }
  ExpectNoFailures(DriveCommunicators(backend, std::move(comms), devices, [](RankContext& context) {
    RunScenario("grouped,variable", context);
  }));
}

TEST(NcclInitRanks, TwoRanksOnOneGpuAreRefusedBeforeNcclIsCalled) {
  REQUIRE_DEVICES(1);
  auto backend = Backend::Load("nccl");
  const std::vector<int> ranks = {0, 1};
  const std::vector<int> devices = {0, 0};
  try {
    backend->CommInitRanks(2, backend->GetUniqueId(), ranks, devices);
    ADD_FAILURE() << "two ranks on GPU 0 were accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclInvalidUsage) << error.what();
    EXPECT_NE(std::string(error.what()).find("one GPU"), std::string::npos) << error.what();
  }
}

// get_link_bandwidth through NVML: on an NVLink machine (the H200 host:
// "NVLink 4 x 18", 450 GB/s) the active links times their rate; printed
// for the log either way.
TEST(NcclLink, DeviceZerosLinkIsReportedWithItsKind) {
  REQUIRE_DEVICES(1);
  const auto link = Backend::Load("nccl")->GetLinkBandwidth(0);
  ASSERT_TRUE(link.has_value());
  std::printf("link of device 0: %s, %.0f GB/s per direction\n", link->kind.c_str(),
              link->peak_GBps);
  if (link->kind.rfind("unknown", 0) == 0) GTEST_SKIP() << link->kind;
  EXPECT_GT(link->peak_GBps, 0) << link->kind;
  EXPECT_TRUE(link->kind.rfind("NVLink ", 0) == 0 || link->kind.rfind("PCIe gen", 0) == 0)
      << link->kind;
}

// The allocator is chosen once per process: each case runs in a process of
// its own (a death test re-runs this binary), allocates and says how it went.
TEST(NcclMemAlloc, TheVariableChoosesTheAllocatorAndAnUnknownValueIsOneClearError) {
  REQUIRE_DEVICES(1);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto allocate_with = [](const char* value) {
    setenv("INFINI_CCL_NCCL_MEM_ALLOC", value, 1);
    try {
      DeviceBuffer buffer(Backend::Load("nccl"), 1 << 20);
      std::fprintf(stderr, "allocated\n");
      std::exit(0);
    } catch (const Error& error) {
      std::fprintf(stderr, "%s\n", error.what());
      std::exit(3);
    }
  };
  for (const char* value : {"", "nccl", "cuda"}) {
    EXPECT_EXIT(allocate_with(value), ::testing::ExitedWithCode(0), "allocated") << value;
  }
  EXPECT_EXIT(allocate_with("cudaMalloc"), ::testing::ExitedWithCode(3),
              "INFINI_CCL_NCCL_MEM_ALLOC='cudaMalloc': expected 'nccl' \\(ncclMemAlloc, the "
              "default\\) or 'cuda' \\(cudaMalloc\\)");
}

TEST(NcclThreadRanks, BarrierWaitsForTheLastRank) {
  REQUIRE_DEVICES(kRanksNeeded);
  std::barrier ready(visible_devices);
  ExpectNoFailures(RunThreadRanks(visible_devices, [&](RankContext& context) {
    // NCCL connects peers at a communicator's first collective, blocking the
    // host call until every rank arrives; connect first so that the barrier
    // below is enqueued at once and its completion is what is observed.
    context.comm->Barrier(*context.stream);
    context.Wait("first barrier");
    ready.arrive_and_wait();
    if (context.rank == context.world_size - 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
    }
    context.comm->Barrier(*context.stream);
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

// comm_init_ranks in a group whose other ranks are held by other processes:
// two ranks per process where four GPUs are visible, else one.
TEST(NcclProcessRanks, CommInitRanksJoinsRanksHeldByOtherProcesses) {
  REQUIRE_DEVICES(kRanksNeeded);
  const int ranks_per_process = visible_devices >= 4 ? 2 : 1;
  const int world_size = visible_devices - visible_devices % ranks_per_process;
  const std::vector<std::string> failures =
      RunProcessRanks(world_size, "grouped,p2p_ring,variable", std::chrono::seconds(300),
                      ranks_per_process, InitMode::kInitRanks);
  EXPECT_TRUE(failures.empty()) << Describe(failures) << "(worker output is above)";
}

// ---- Vendor options, async errors, capabilities --------------------------

// Options NCCL takes from ncclConfig_t, options for another backend (skipped)
// and the fields the plugin accepts without using them.
TEST(NcclVendorOptions, KnownOptionsAreAppliedAndCollectivesStillMatch) {
  REQUIRE_DEVICES(kRanksNeeded);
  CommConfig config;
  config.name = "vendor_options_test";
  config.timeout_ms = 60000;
  config.stream_priority = -1;
  config.vendor_options = {{"nccl", "min_ctas", "1"},
                           {"nccl", "max_ctas", "2"},
                           {"nccl", "cga_cluster_size", "2"},
                           {"nccl", "cta_policy", "1"},
                           {"gloo", "no_such_key", "skipped"}};
  RunInThreads("grouped,p2p_ring", visible_devices, config);
}

// NCCL's own explanation reaches the caller through GetAsyncError: an
// argument NCCL refuses on a non-blocking communicator becomes its
// asynchronous error (NCCL sets it in ncclEnqueueCheck).
TEST(NcclAsyncError, ErrorOfNonBlockingCommunicatorCarriesNcclsText) {
  REQUIRE_DEVICES(1);
  auto backend = Backend::Load("nccl");
  const auto& plugin = PluginTable(*backend);
  backend->SetDevice(0);
  CommConfig config;
  config.blocking = false;
  Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0, config);
  std::string message = "unset";
  infiniCclResult_t state = infiniCclInProgress;
  const auto deadline = steady_clock::now() + kCollectiveDeadline;
  while ((state = comm.GetAsyncError(&message)) == infiniCclInProgress &&
         steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(state, infiniCclSuccess) << message;
  EXPECT_EQ(message, "") << "a healthy communicator has no async error text";

  // Root 1 of a one-rank group: the C++ API would refuse it, the raw entry
  // hands it to NCCL.
  Stream stream(backend);
  DeviceBuffer buffer(backend, sizeof(float));
  const infiniCclResult_t enqueued = plugin.broadcast(
      buffer.data(), buffer.data(), 1, dtype::kFloat32, /*root=*/1, comm.handle(), stream.handle());
  EXPECT_EQ(enqueued, infiniCclInvalidArgument) << plugin.get_last_error();
  state = comm.GetAsyncError(&message);
  EXPECT_EQ(state, infiniCclInvalidArgument) << message;
  EXPECT_NE(message.find("root"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  comm.Abort();
}

TEST(NcclCapabilities, TypeNcclCannotReduceIsRefusedBeforeThePluginIsCalled) {
  REQUIRE_DEVICES(1);
  auto backend = Backend::Load("nccl");
  const auto& plugin = PluginTable(*backend);
  backend->SetDevice(0);
  Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  Stream stream(backend);

  // Declared and served: bf16 average (one rank: the input itself).
  ASSERT_TRUE(
      backend->capabilities().Supports(Collective::kAllReduce, dtype::kBFloat16, ReduceOp::kAvg));
  const uint16_t three = 0x4040;  // 3.0 in bfloat16
  DeviceBuffer bf16(backend, sizeof(three));
  bf16.CopyFromHost(&three, sizeof(three));
  comm.AllReduce(bf16.AsTensor(dtype::kBFloat16, 1), bf16.AsTensor(dtype::kBFloat16, 1),
                 ReduceOp::kAvg, stream);
  stream.Synchronize();
  uint16_t result = 0;
  bf16.CopyToHost(&result, sizeof(result));
  EXPECT_EQ(result, three);

  // Not declared: bool sum. The refusal comes from the C++ layer; the
  // plugin's last error on this thread is still the one set below.
  const DLDataType boolean{INFINI_CCL_DL_BOOL, 8, 1};
  ASSERT_FALSE(backend->capabilities().Supports(Collective::kAllReduce, boolean, ReduceOp::kSum));
  ASSERT_EQ(plugin.set_device(-1), infiniCclInvalidArgument);
  const std::string marker = plugin.get_last_error();
  DeviceBuffer flags(backend, 4);
  try {
    comm.AllReduce(flags.AsTensor(boolean, 4), flags.AsTensor(boolean, 4), ReduceOp::kSum, stream);
    ADD_FAILURE() << "bool sum all_reduce was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclUnsupported) << error.what();
    EXPECT_NE(std::string(error.what()).find("all_reduce on bool with sum"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(std::string(plugin.get_last_error()), marker) << "the plugin was called";
  comm.Destroy();
}

// ---- Raw ABI: non-blocking communicators, abort, device sharing ---------

struct RawComm {
  infiniCclComm_t handle = nullptr;
  infiniCclResult_t init_result = infiniCclSuccess;
};

// Creates a non-blocking communicator and polls until it is ready.
infiniCclResult_t InitNonBlocking(const Backend& backend, int world_size, const UniqueId& id,
                                  int rank, infiniCclComm_t* comm) {
  const auto& plugin = PluginTable(backend);
  infiniCclConfig_t config = INFINI_CCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.comm_name = "nonblocking_test";
  infiniCclResult_t result =
      plugin.comm_init_rank(comm, world_size, id.bytes().data(), rank, &config, nullptr);
  if (result != infiniCclSuccess && result != infiniCclInProgress) return result;
  const auto deadline = steady_clock::now() + kCollectiveDeadline;
  infiniCclResult_t state = infiniCclInProgress;
  while (state == infiniCclInProgress && steady_clock::now() < deadline) {
    const infiniCclResult_t polled = plugin.comm_get_async_error(*comm, &state, nullptr);
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
      const auto& plugin = PluginTable(*backend);
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
      const auto& plugin = PluginTable(*backend);
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
          plugin.comm_get_async_error(comm, &state, nullptr);
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
        plugin.comm_get_async_error(comm, &state, nullptr);
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
        // A collective that waits for a peer is not an error: nothing to
        // explain yet, which is why the watchdog, not NCCL, decides.
        infiniCclResult_t waiting = infiniCclInternalError;
        const char* text = nullptr;
        if (plugin.comm_get_async_error(comm, &waiting, &text) != infiniCclSuccess ||
            waiting != infiniCclSuccess || text == nullptr || *text != '\0') {
          failure += " async error while waiting: " + std::to_string(waiting) + " '" +
                     (text == nullptr ? "(null)" : text) + "'";
        }
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

// ---- Shrink and revoke (NCCL >= 2.27 / 2.28) ------------------------------------

// A float32 sum all_reduce of one element holding `value` on `comm`.
float SumOf(const Communicator& comm, float value) {
  Stream stream(comm.backend());
  DeviceBuffer buffer(comm.backend(), sizeof(float));
  buffer.CopyFromHost(&value, sizeof(value));
  comm.AllReduce(buffer.AsTensor(dtype::kFloat32, 1), buffer.AsTensor(dtype::kFloat32, 1),
                 ReduceOp::kSum, stream);
  stream.Synchronize();
  float sum = 0;
  buffer.CopyToHost(&sum, sizeof(sum));
  return sum;
}

// One GPU: a world of one shrinks, excluding nobody, to a copy (NCCL
// refuses an empty list; the plugin splits instead); a revoked
// communicator refuses work, still shrinks, and is still destroyed.
TEST(NcclShrink, OneRankExcludingNoneShrinksToACopyAndARevokedOneIsDestroyed) {
  REQUIRE_DEVICES(1);
  auto backend = Backend::Load("nccl");
  if (!backend->capabilities().shrink()) GTEST_SKIP() << "this NCCL has no ncclCommShrink";
  backend->SetDevice(0);
  Communicator comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  Communicator copy = comm.Shrink({});
  EXPECT_EQ(copy.world_size(), 1);
  EXPECT_EQ(copy.rank(), 0);
  EXPECT_EQ(SumOf(copy, 2.5f), 2.5f);
  copy.Destroy();
  if (backend->capabilities().revoke()) {
    comm.Revoke();
    std::string message;
    infiniCclResult_t state = comm.GetAsyncError(&message);
    const auto deadline = steady_clock::now() + kCollectiveDeadline;
    while (state == infiniCclInProgress && steady_clock::now() < deadline) {
      state = comm.GetAsyncError(&message);
    }
    EXPECT_NE(state, infiniCclInProgress) << "the revoke never settled";
    EXPECT_THROW(SumOf(comm, 1.0f), Error) << "a revoked communicator took new work";
    // Revoke, then shrink: what parallel/ does after a loss.
    Communicator after = comm.Shrink({});
    EXPECT_EQ(SumOf(after, 4.0f), 4.0f);
    after.Destroy();
  }
  EXPECT_NO_THROW(comm.Destroy());
}

// Two GPUs: the last rank takes no part and the survivor shrinks to a
// world of one, by default and, with a receive from the lost rank pending,
// with the abort flag (the receive is ended, the shrink returns).
TEST(NcclShrink, TwoRanksShrinkToOneByDefaultAndWithTheAbortFlag) {
  REQUIRE_DEVICES(2);
  auto backend = Backend::Load("nccl");
  if (!backend->capabilities().shrink()) GTEST_SKIP() << "this NCCL has no ncclCommShrink";
  for (ShrinkMode mode : {ShrinkMode::kDefault, ShrinkMode::kAbort}) {
    SCOPED_TRACE(mode == ShrinkMode::kAbort ? "abort flag" : "default");
    const UniqueId id = backend->GetUniqueId();
    std::atomic<bool> survivor_done{false};
    std::string failure;
    std::thread lost([&] {
      backend->SetDevice(1);
      Communicator comm = backend->CommInitRank(2, id, 1);
      SumOf(comm, 1.0f);  // connected, then it takes no part
      while (!survivor_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      comm.Abort();
    });
    try {
      backend->SetDevice(0);
      Communicator comm = backend->CommInitRank(2, id, 0);
      if (SumOf(comm, 1.0f) != 2.0f) failure = "the two-rank all_reduce was wrong";
      Stream pending(backend);
      DeviceBuffer buffer(backend, sizeof(float));
      if (mode == ShrinkMode::kAbort) {
        comm.Recv(buffer.AsTensor(dtype::kFloat32, 1), 1, pending);  // never sent
      }
      const auto start = steady_clock::now();
      const int excluded[] = {1};
      Communicator alone = comm.Shrink(excluded, mode);
      if (steady_clock::now() - start > kCollectiveDeadline)
        failure += "; the shrink took too long";
      if (alone.world_size() != 1 || alone.rank() != 0) failure += "; wrong shrunk world";
      if (SumOf(alone, 3.0f) != 3.0f) failure += "; the survivor's all_reduce was wrong";
      alone.Destroy();
      comm.Abort();
    } catch (const std::exception& error) {
      failure += std::string("; ") + error.what();
    }
    survivor_done = true;
    lost.join();
    EXPECT_EQ(failure, "");
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
