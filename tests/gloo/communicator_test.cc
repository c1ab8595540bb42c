// Communicator behaviour of the gloo backend: point-to-point in groups,
// split, abort, dead peers, timeouts, and ids or settings it must refuse.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "rank_runner.h"

namespace infini::gloo_test {
namespace {

using ccl::DeviceBuffer;
using Clock = std::chrono::steady_clock;

ccl::CommConfig ConfigWithTimeout(int64_t timeout_ms) {
  ccl::CommConfig config;
  config.timeout_ms = timeout_ms;
  return config;
}

std::vector<int64_t> Fetch(const DeviceBuffer& buffer, size_t count) {
  std::vector<int64_t> values(count);
  buffer.CopyToHost(values.data(), count * sizeof(int64_t));
  return values;
}

DeviceBuffer Holding(const ccl::Communicator& comm, const std::vector<int64_t>& values) {
  DeviceBuffer buffer(comm.backend(), values.size() * sizeof(int64_t));
  buffer.CopyFromHost(values.data(), values.size() * sizeof(int64_t));
  return buffer;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Everyone sends to the right and receives from the left inside one group:
// without grouping every rank would wait in its send.
void RingExchange(ccl::Communicator& comm) {
  const auto& backend = comm.backend();
  const int world_size = comm.world_size();
  const int right = (comm.rank() + 1) % world_size;
  const int left = (comm.rank() + world_size - 1) % world_size;
  const size_t count = 1001;
  std::vector<int64_t> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = comm.rank() * 100000 + static_cast<int64_t>(i);
  DeviceBuffer send = Holding(comm, mine);
  DeviceBuffer recv(backend, count * sizeof(int64_t));
  backend->GroupStart();
  comm.Send(send.AsTensor(ccl::dtype::kInt64, count), right);
  comm.Recv(recv.AsTensor(ccl::dtype::kInt64, count), left);
  backend->GroupEnd();
  const std::vector<int64_t> got = Fetch(recv, count);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(got[i], left * 100000 + static_cast<int64_t>(i)) << "element " << i;
  }
}

TEST(GlooPointToPoint, RingOfSendsThenRecvsInOneGroupCompletesWithThreads) {
  for (int world_size : {1, 2, 3, 8}) {
    RunRanks(Launch::kThreads, world_size, RingExchange, ConfigWithTimeout(60000));
  }
}

TEST(GlooPointToPoint, RingOfSendsThenRecvsInOneGroupCompletesWithProcesses) {
  RunRanks(Launch::kProcesses, 3, RingExchange, ConfigWithTimeout(60000));
}

TEST(GlooPointToPoint, UngroupedSendAndRecvPairUp) {
  RunRanks(
      Launch::kThreads, 2,
      [](ccl::Communicator& comm) {
        DeviceBuffer buffer = Holding(comm, {comm.rank() == 0 ? 42 : 0, 7});
        const ccl::FlatTensor tensor = buffer.AsTensor(ccl::dtype::kInt64, 2);
        if (comm.rank() == 0) {
          comm.Send(tensor, 1);
        } else {
          comm.Recv(tensor, 0);
          EXPECT_EQ(Fetch(buffer, 2), (std::vector<int64_t>{42, 7}));
        }
      },
      ConfigWithTimeout(60000));
}

TEST(GlooPointToPoint, CollectivesInsideAGroupRunAtGroupEnd) {
  RunRanks(
      Launch::kThreads, 3,
      [](ccl::Communicator& comm) {
        const auto& backend = comm.backend();
        DeviceBuffer first = Holding(comm, {comm.rank() + 1});
        DeviceBuffer second = Holding(comm, {10 * (comm.rank() + 1)});
        backend->GroupStart();
        comm.AllReduce(first.AsTensor(ccl::dtype::kInt64, 1), first.AsTensor(ccl::dtype::kInt64, 1),
                       ccl::ReduceOp::kSum);
        comm.AllReduce(second.AsTensor(ccl::dtype::kInt64, 1),
                       second.AsTensor(ccl::dtype::kInt64, 1), ccl::ReduceOp::kMax);
        backend->GroupEnd();
        EXPECT_EQ(Fetch(first, 1)[0], 6);
        EXPECT_EQ(Fetch(second, 1)[0], 30);
      },
      ConfigWithTimeout(60000));
}

// Even and odd ranks form two groups, ordered by descending old rank (key).
void SplitEvenOdd(ccl::Communicator& comm) {
  const int color = comm.rank() % 2;
  ccl::Communicator half = comm.Split(color, -comm.rank());
  ASSERT_TRUE(half.valid());
  const int world_size = comm.world_size();
  const int members = (world_size - color + 1) / 2;
  EXPECT_EQ(half.world_size(), members);
  // Descending old rank: the highest old rank of this color is new rank 0.
  const int highest = (world_size - 1) % 2 == color ? world_size - 1 : world_size - 2;
  EXPECT_EQ(half.rank(), (highest - comm.rank()) / 2);
  DeviceBuffer value = Holding(comm, {comm.rank()});
  half.AllReduce(value.AsTensor(ccl::dtype::kInt64, 1), value.AsTensor(ccl::dtype::kInt64, 1),
                 ccl::ReduceOp::kSum);
  int64_t want = 0;
  for (int r = color; r < world_size; r += 2) want += r;
  EXPECT_EQ(Fetch(value, 1)[0], want);
  // The parent still works after the split.
  DeviceBuffer all = Holding(comm, {1});
  comm.AllReduce(all.AsTensor(ccl::dtype::kInt64, 1), all.AsTensor(ccl::dtype::kInt64, 1),
                 ccl::ReduceOp::kSum);
  EXPECT_EQ(Fetch(all, 1)[0], world_size);
}

TEST(GlooSplit, EvenAndOddRanksAllReduceWithinTheirOwnGroupWithThreads) {
  RunRanks(Launch::kThreads, 5, SplitEvenOdd, ConfigWithTimeout(60000));
}

TEST(GlooSplit, EvenAndOddRanksAllReduceWithinTheirOwnGroupWithProcesses) {
  RunRanks(Launch::kProcesses, 4, SplitEvenOdd, ConfigWithTimeout(60000));
}

TEST(GlooSplit, NegativeColorGivesNoCommunicatorAndOthersStillSplit) {
  RunRanks(
      Launch::kThreads, 3,
      [](ccl::Communicator& comm) {
        const int color = comm.rank() == 1 ? -1 : 0;
        ccl::Communicator sub = comm.Split(color, 0);
        if (comm.rank() == 1) {
          EXPECT_FALSE(sub.valid());
          return;
        }
        ASSERT_TRUE(sub.valid());
        EXPECT_EQ(sub.world_size(), 2);
        sub.Barrier();
      },
      ConfigWithTimeout(60000));
}

TEST(GlooAbort, AbortFromAnotherThreadUnblocksABlockedAllReduceAndItsPeer) {
  const auto& backend = GlooBackend();
  const ccl::UniqueId id = backend->GetUniqueId();
  const ccl::CommConfig config = ConfigWithTimeout(120000);
  ccl::Communicator rank1;
  std::thread joiner([&] { rank1 = backend->CommInitRank(2, id, 1, config); });
  ccl::Communicator rank0 = backend->CommInitRank(2, id, 0, config);
  joiner.join();

  // Rank 0 waits in an all-reduce, rank 1 in a barrier: neither can finish.
  const auto start = Clock::now();
  std::atomic<bool> peer_failed{false};
  std::thread peer([&] {
    try {
      rank1.Barrier();
    } catch (const ccl::Error&) {
      peer_failed = true;
    }
  });
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    rank0.Abort();
  });
  DeviceBuffer buffer = Holding(rank0, {1, 2, 3});
  infiniCclResult_t code = infiniCclSuccess;
  try {
    rank0.AllReduce(buffer.AsTensor(ccl::dtype::kInt64, 3), buffer.AsTensor(ccl::dtype::kInt64, 3),
                    ccl::ReduceOp::kSum);
  } catch (const ccl::Error& e) {
    code = e.code();
  }
  aborter.join();
  peer.join();
  EXPECT_EQ(code, infiniCclAborted);
  EXPECT_TRUE(peer_failed) << "the aborted rank's peer must fail, not wait";
  EXPECT_LT(SecondsSince(start), 30.0) << "abort must not wait for the 120 s timeout";
  std::string why;
  EXPECT_NE(rank1.GetAsyncError(&why), infiniCclSuccess);
  EXPECT_NE(why.find("barrier"), std::string::npos)
      << "the peer's async error must say which call failed: '" << why << "'";
}

TEST(GlooFailures, DeadPeerProcessMakesTheOtherFailWithRemoteErrorNotHang) {
  RunRanks(
      Launch::kProcesses, 3,
      [](ccl::Communicator& comm) {
        comm.Barrier();  // everyone is connected
        if (comm.rank() == 2) {
          // Dies without a word while the others wait for it in an all-reduce.
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          _exit(kRankPassedStatus);
        }
        DeviceBuffer buffer = Holding(comm, {1});
        const auto start = Clock::now();
        try {
          for (int i = 0; i < 3; ++i) {
            comm.AllReduce(buffer.AsTensor(ccl::dtype::kInt64, 1),
                           buffer.AsTensor(ccl::dtype::kInt64, 1), ccl::ReduceOp::kSum);
          }
          ADD_FAILURE() << "all_reduce with a dead peer succeeded";
        } catch (const ccl::Error& e) {
          EXPECT_EQ(e.code(), infiniCclRemoteError) << e.what();
        }
        EXPECT_LT(SecondsSince(start), 30.0) << "must not wait for the 120 s timeout";
        std::string why;
        EXPECT_EQ(comm.GetAsyncError(&why), infiniCclRemoteError);
        EXPECT_NE(why.find("all_reduce"), std::string::npos)
            << "the async error must say which call failed: '" << why << "'";
      },
      ConfigWithTimeout(120000), 60);
}

// Ranks that disagree on a collective's size (two gpt2 ranks with different
// model shapes) get an error each, never a SIGABRT from an exception that
// escapes gloo (RunRanks fails a rank that ends by a signal). Debian's
// libgloo checks an incoming length on its transport's event-loop thread
// ("op.preamble.length <= op.nbytes"), outside any ABI entry; the plugin
// folds the sizes into its tags and slots so that such messages never meet.
void AllReduceOfDifferentCountsFailsOnEveryRank(int64_t small, int64_t large) {
  RunRanks(
      Launch::kProcesses, 2,
      [small, large](ccl::Communicator& comm) {
        comm.Barrier();  // both connected
        const int64_t count = comm.rank() == 0 ? small : large;
        DeviceBuffer buffer = Holding(comm, std::vector<int64_t>(static_cast<size_t>(count), 1));
        const auto start = Clock::now();
        try {
          comm.AllReduce(buffer.AsTensor(ccl::dtype::kInt64, count),
                         buffer.AsTensor(ccl::dtype::kInt64, count), ccl::ReduceOp::kSum);
          ADD_FAILURE() << "all_reduce of " << count << " elements against a peer's other size "
                        << "succeeded";
        } catch (const ccl::Error& e) {
          EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
        }
        EXPECT_LT(SecondsSince(start), 30.0) << "must end by the 5 s timeout at the latest";
      },
      ConfigWithTimeout(5000), 60);
}

TEST(GlooFailures, AllReduceOfDifferentSmallCountsIsAnErrorOnEveryRankNotAnAbort) {
  AllReduceOfDifferentCountsFailsOnEveryRank(4, 7);
}

TEST(GlooFailures, AllReduceOfDifferentLargeCountsIsAnErrorOnEveryRankNotAnAbort) {
  AllReduceOfDifferentCountsFailsOnEveryRank(1000, 300000);
}

// The calls whose sizes each rank states for itself: rank 1 sends rank 0
// `large` elements where rank 0 expects `small` (and the other way round), as
// two ranks with different model shapes would.
enum class SizedCall { kSendRecv, kAllToAllV, kAllGatherV };

void DisagreeingSizesFailOnEveryRank(SizedCall call, int64_t small, int64_t large) {
  RunRanks(
      Launch::kProcesses, 2,
      [=](ccl::Communicator& comm) {
        comm.Barrier();  // both connected
        const int64_t mine = comm.rank() == 0 ? small : large;
        const int64_t theirs_as_i_think = mine;  // each assumes the peer's size is its own
        const auto peer = static_cast<size_t>(1 - comm.rank());
        DeviceBuffer send = Holding(comm, std::vector<int64_t>(static_cast<size_t>(mine), 1));
        DeviceBuffer recv =
            Holding(comm, std::vector<int64_t>(static_cast<size_t>(2 * theirs_as_i_think), 0));
        const auto start = Clock::now();
        try {
          switch (call) {
            case SizedCall::kSendRecv:
              comm.backend()->GroupStart();
              comm.Send(send.AsTensor(ccl::dtype::kInt64, mine), static_cast<int>(peer));
              comm.Recv(recv.AsTensor(ccl::dtype::kInt64, theirs_as_i_think),
                        static_cast<int>(peer));
              comm.backend()->GroupEnd();
              break;
            case SizedCall::kAllToAllV: {
              std::vector<size_t> counts(2, 0), displacements(2, 0);
              counts[peer] = static_cast<size_t>(mine);
              comm.AllToAllV(send.AsTensor(ccl::dtype::kInt64, mine), counts, displacements,
                             recv.AsTensor(ccl::dtype::kInt64, 2 * mine), counts, displacements);
              break;
            }
            case SizedCall::kAllGatherV: {
              std::vector<size_t> counts(2, static_cast<size_t>(mine)), displacements(2, 0);
              displacements[1] = static_cast<size_t>(mine);
              comm.AllGatherV(send.AsTensor(ccl::dtype::kInt64, mine),
                              recv.AsTensor(ccl::dtype::kInt64, 2 * mine), counts, displacements);
              break;
            }
          }
          ADD_FAILURE() << "rank " << comm.rank() << " completed a call whose sizes the ranks "
                        << "disagree on";
        } catch (const ccl::Error& e) {
          EXPECT_NE(e.code(), infiniCclSuccess) << e.what();
        }
        EXPECT_LT(SecondsSince(start), 30.0) << "must end by the 3 s timeout at the latest";
      },
      ConfigWithTimeout(3000), 60);
}

TEST(GlooFailures, SendAndRecvOfDifferentSizesAreAnErrorNotAnAbort) {
  DisagreeingSizesFailOnEveryRank(SizedCall::kSendRecv, 250, 50000);
}

TEST(GlooFailures, AllToAllVOfDisagreeingCountsIsAnErrorNotAnAbort) {
  DisagreeingSizesFailOnEveryRank(SizedCall::kAllToAllV, 250, 50000);
}

TEST(GlooFailures, AllGatherVOfDisagreeingCountsIsAnErrorNotAnAbort) {
  DisagreeingSizesFailOnEveryRank(SizedCall::kAllGatherV, 250, 50000);
}

TEST(GlooFailures, HealthyCommunicatorHasNoAsyncErrorAndNoText) {
  RunRanks(
      Launch::kThreads, 2,
      [](ccl::Communicator& comm) {
        comm.Barrier();
        std::string why = "unchanged";
        EXPECT_EQ(comm.GetAsyncError(&why), infiniCclSuccess);
        EXPECT_EQ(why, "");
      },
      ConfigWithTimeout(60000));
}

TEST(GlooFailures, RankWhosePeerNeverJoinsTimesOutWithTimeoutError) {
  const auto& backend = GlooBackend();
  const ccl::UniqueId id = backend->GetUniqueId();
  const auto start = Clock::now();
  try {
    backend->CommInitRank(2, id, 0, ConfigWithTimeout(1000));
    ADD_FAILURE() << "comm_init_rank without its peer succeeded";
  } catch (const ccl::Error& e) {
    EXPECT_EQ(e.code(), infiniCclTimeout) << e.what();
  }
  EXPECT_LT(SecondsSince(start), 20.0);
}

TEST(GlooUniqueId, ForeignUniqueIdIsRefusedAsInvalidArgument) {
  const auto& backend = GlooBackend();
  const size_t id_bytes = backend->info().unique_id_bytes;
  std::string nccl_like(id_bytes, '\0');
  for (size_t i = 0; i < nccl_like.size(); ++i) nccl_like[i] = static_cast<char>(i * 37 + 1);
  for (const ccl::UniqueId& foreign :
       {ccl::UniqueId(std::string(id_bytes, '\0')), ccl::UniqueId::FromBytes(nccl_like)}) {
    try {
      backend->CommInitRank(1, foreign, 0);
      ADD_FAILURE() << "a foreign unique id was accepted";
    } catch (const ccl::Error& e) {
      EXPECT_EQ(e.code(), infiniCclInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("unique id"), std::string::npos) << e.what();
    }
  }
}

TEST(GlooUniqueId, EveryIdNamesADistinctGroup) {
  const auto& backend = GlooBackend();
  EXPECT_FALSE(backend->GetUniqueId() == backend->GetUniqueId());
}

TEST(GlooInterface, MissingSocketInterfaceIsRefusedNamingTheVariable) {
  const auto& backend = GlooBackend();
  const ccl::UniqueId id = backend->GetUniqueId();
  setenv("GLOO_SOCKET_IFNAME", "nosuchif0", 1);
  try {
    backend->CommInitRank(1, id, 0, ConfigWithTimeout(5000));
    ADD_FAILURE() << "a missing interface was accepted";
  } catch (const ccl::Error& e) {
    EXPECT_EQ(e.code(), infiniCclInvalidUsage);
    EXPECT_NE(std::string(e.what()).find("GLOO_SOCKET_IFNAME=nosuchif0"), std::string::npos)
        << e.what();
  }
  unsetenv("GLOO_SOCKET_IFNAME");
}

TEST(GlooInterface, LoopbackInterfaceFromTheVariableWorks) {
  setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  RunRanks(
      Launch::kThreads, 2, [](ccl::Communicator& comm) { comm.Barrier(); },
      ConfigWithTimeout(60000));
  unsetenv("GLOO_SOCKET_IFNAME");
}

}  // namespace
}  // namespace infini::gloo_test
