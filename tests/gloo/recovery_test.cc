// Recovery on the gloo backend: Communicator::Shrink re-forms the group
// among the survivors through the communicator's store, Revoke ends the
// outstanding work; with ranks as threads and as processes, a lost rank
// being one that takes no part or one that is dead.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "rank_runner.h"

namespace infini::gloo_test {
namespace {

using ccl::DeviceBuffer;
using ccl::ShrinkMode;
using Clock = std::chrono::steady_clock;

ccl::CommConfig ConfigWithTimeout(int64_t timeout_ms) {
  ccl::CommConfig config;
  config.timeout_ms = timeout_ms;
  return config;
}

// Every rank's old rank, gathered on `comm`: the order of the survivors.
std::vector<int64_t> GatherOldRanks(const ccl::Communicator& comm, int old_rank) {
  const int64_t mine = old_rank;
  DeviceBuffer send(comm.backend(), sizeof(int64_t));
  send.CopyFromHost(&mine, sizeof(mine));
  DeviceBuffer recv(comm.backend(), comm.world_size() * sizeof(int64_t));
  comm.AllGather(send.AsTensor(ccl::dtype::kInt64, 1),
                 recv.AsTensor(ccl::dtype::kInt64, comm.world_size()));
  std::vector<int64_t> all(static_cast<size_t>(comm.world_size()));
  recv.CopyToHost(all.data(), all.size() * sizeof(int64_t));
  return all;
}

// The survivors' communicator: its size and renumbered rank, the old ranks
// in order, and a broadcast from its last rank.
void ExpectSurvivorsWorld(const ccl::Communicator& shrunk, int old_rank,
                          const std::vector<int64_t>& survivors) {
  ASSERT_EQ(shrunk.world_size(), static_cast<int>(survivors.size()));
  int expected_rank = 0;
  while (survivors[static_cast<size_t>(expected_rank)] != old_rank) ++expected_rank;
  EXPECT_EQ(shrunk.rank(), expected_rank);
  EXPECT_EQ(GatherOldRanks(shrunk, old_rank), survivors);
  const int64_t value = shrunk.rank() == shrunk.world_size() - 1 ? 4242 : -1;
  DeviceBuffer buffer(shrunk.backend(), sizeof(int64_t));
  buffer.CopyFromHost(&value, sizeof(value));
  shrunk.Broadcast(buffer.AsTensor(ccl::dtype::kInt64, 1), buffer.AsTensor(ccl::dtype::kInt64, 1),
                   shrunk.world_size() - 1);
  int64_t got = 0;
  buffer.CopyToHost(&got, sizeof(got));
  EXPECT_EQ(got, 4242);
}

// The last rank takes no part: it frees its communicator at once, as a
// rank that left would.
void ShrinkWithoutLastRank(ccl::Communicator& comm) {
  const int last = comm.world_size() - 1;
  if (comm.rank() == last) return comm.Destroy();
  const int excluded[] = {last};
  ccl::Communicator shrunk = comm.Shrink(excluded);
  std::vector<int64_t> survivors;
  for (int r = 0; r < last; ++r) survivors.push_back(r);
  ExpectSurvivorsWorld(shrunk, comm.rank(), survivors);
}

TEST(GlooShrink, SurvivorsOfALastRankThatLeftFormASmallerWorldWithThreads) {
  RunRanks(Launch::kThreads, 3, ShrinkWithoutLastRank, ConfigWithTimeout(30000));
}

TEST(GlooShrink, SurvivorsOfALastRankThatLeftFormASmallerWorldOverTheHostBootstrap) {
  RunRanks(Launch::kThreadsOverBootstrap, 3, ShrinkWithoutLastRank, ConfigWithTimeout(30000));
}

// Ranks 1 and 3 of 5 are lost: 0, 2, 4 become 0, 1, 2, in their old order;
// the list is given unsorted and with a duplicate, as the host normalises.
TEST(GlooShrink, RanksAreRenumberedToFillTheGapsOfAnUnsortedList) {
  RunRanks(
      Launch::kThreads, 5,
      [](ccl::Communicator& comm) {
        if (comm.rank() == 1 || comm.rank() == 3) return;
        const int excluded[] = {3, 1, 3};
        ccl::Communicator shrunk = comm.Shrink(excluded);
        ExpectSurvivorsWorld(shrunk, comm.rank(), {0, 2, 4});
      },
      ConfigWithTimeout(30000));
}

// Two shrinks of one parent, and a shrink of a shrunk communicator: each
// meets under keys of its own.
TEST(GlooShrink, ShrinksInARowNeverMeetUnderAnEarlierShrinksKeys) {
  RunRanks(
      Launch::kThreads, 4,
      [](ccl::Communicator& comm) {
        if (comm.rank() == 3) return;
        const int lost_three[] = {3};
        ccl::Communicator first = comm.Shrink(lost_three);
        ccl::Communicator again = comm.Shrink(lost_three);
        ExpectSurvivorsWorld(first, comm.rank(), {0, 1, 2});
        ExpectSurvivorsWorld(again, comm.rank(), {0, 1, 2});
        if (first.rank() == 0) return;
        const int lost_zero[] = {0};
        ccl::Communicator smaller = first.Shrink(lost_zero);
        ExpectSurvivorsWorld(smaller, first.rank(), {1, 2});
      },
      ConfigWithTimeout(30000));
}

// A real loss: the last rank's process ends without freeing anything while
// the others wait for it in a receive on another thread; Shrink with the
// abort flag ends that receive and returns, and the survivors go on.
TEST(GlooShrink, AbortFlagEndsARecvFromADeadProcessAndTheSurvivorsGoOn) {
  RunRanks(
      Launch::kProcesses, 3,
      [](ccl::Communicator& comm) {
        const int last = comm.world_size() - 1;
        if (comm.rank() == last) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          _exit(kRankPassedStatus);  // dead: no destroy, sockets closed by the kernel
        }
        DeviceBuffer buffer(comm.backend(), sizeof(float));
        std::atomic<int> recv_code{-1};
        std::thread pending([&] {
          try {
            comm.Recv(buffer.AsTensor(ccl::dtype::kFloat32, 1), last);
            recv_code = infiniCclSuccess;
          } catch (const ccl::Error& error) {
            recv_code = error.code();
          }
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        const auto start = Clock::now();
        const int excluded[] = {last};
        ccl::Communicator shrunk = comm.Shrink(excluded, ShrinkMode::kAbort);
        pending.join();
        EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
        EXPECT_NE(recv_code.load(), infiniCclSuccess);
        ExpectSurvivorsWorld(shrunk, comm.rank(), {0, 1});
        // The parent serves no more work, and is still freed.
        EXPECT_THROW(comm.Barrier(), ccl::Error);
        comm.Destroy();
      },
      ConfigWithTimeout(60000));
}

// Revoke from another thread ends a receive nobody answers with a remote
// error naming the revoke; later calls fail; the state says why; destroy
// works; and the revoked communicator still shrinks (revoke, then shrink).
TEST(GlooRevoke, RevokeEndsABlockedRecvRefusesLaterCallsAndStillShrinks) {
  for (Launch launch : {Launch::kThreads, Launch::kProcesses}) {
    SCOPED_TRACE(LaunchName(launch));
    RunRanks(
        launch, 3,
        [](ccl::Communicator& comm) {
          DeviceBuffer buffer(comm.backend(), sizeof(float));
          std::thread revoker([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            comm.Revoke();
          });
          const auto start = Clock::now();
          try {
            comm.Recv(buffer.AsTensor(ccl::dtype::kFloat32, 1), (comm.rank() + 1) % 3);
            ADD_FAILURE() << "a recv nobody answered returned on a revoked communicator";
          } catch (const ccl::Error& error) {
            EXPECT_EQ(error.code(), infiniCclRemoteError) << error.what();
          }
          revoker.join();
          EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
          try {
            comm.Barrier();
            ADD_FAILURE() << "a barrier on a revoked communicator returned";
          } catch (const ccl::Error& error) {
            EXPECT_NE(std::string(error.what()).find("revoked"), std::string::npos) << error.what();
          }
          std::string message;
          EXPECT_EQ(comm.GetAsyncError(&message), infiniCclRemoteError);
          EXPECT_NE(message.find("comm_revoke"), std::string::npos) << message;
          if (comm.rank() == 2) return comm.Destroy();
          const int excluded[] = {2};
          ccl::Communicator shrunk = comm.Shrink(excluded);
          ExpectSurvivorsWorld(shrunk, comm.rank(), {0, 1});
          comm.Destroy();
        },
        ConfigWithTimeout(60000));
  }
}

// The host's checks of the list, each one line before the plugin is
// called (so one rank alone can be refused, no peer waits).
TEST(GlooShrink, BadExclusionListsAreOneLineErrorsBeforeThePluginIsCalled) {
  RunRanks(
      Launch::kThreads, 3,
      [](ccl::Communicator& comm) {
        const auto refusal = [&](std::vector<int> excluded) -> std::string {
          try {
            comm.Shrink(excluded);
          } catch (const ccl::Error& error) {
            EXPECT_EQ(error.code(), infiniCclInvalidArgument) << error.what();
            return error.what();
          }
          return "accepted";
        };
        EXPECT_NE(refusal({3}).find("excluded rank 3 is not a rank of this communicator: "
                                    "expected 0..2"),
                  std::string::npos);
        EXPECT_NE(refusal({-1}).find("excluded rank -1"), std::string::npos);
        EXPECT_NE(refusal({0, 1, 2, 1}).find("all 3 ranks"), std::string::npos);
        const std::string self = refusal({comm.rank()});
        EXPECT_NE(self.find("hold this rank (" + std::to_string(comm.rank()) + ")"),
                  std::string::npos)
            << self;
        for (const std::string& text : {refusal({3}), self}) {
          EXPECT_EQ(text.find('\n'), std::string::npos) << text;
        }
        // The communicator is untouched by the refusals.
        comm.Barrier();
      },
      ConfigWithTimeout(30000));
}

}  // namespace
}  // namespace infini::gloo_test
