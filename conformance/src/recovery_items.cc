// The recovery items: comm_shrink and comm_revoke, judged where the plugin
// declares them. One rank plays the lost one: it made the communicator with
// the others, then takes no part; the survivors shrink without it.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "suite_items.h"

namespace infini::conformance::internal {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// Key under which the survivors count themselves done with an item.
std::string SurvivorsDoneKey(const RankContext& context) {
  return context.item_key + "/survivors_done";
}

// A survivor counts itself done when it leaves the item, however it
// leaves (a refused shrink throws), so the excluded rank never waits long.
class SurvivorDone {
 public:
  explicit SurvivorDone(RankContext& context) : context_(context) {}
  ~SurvivorDone() {
    try {
      context_.store->Add(SurvivorsDoneKey(context_), 1);
    } catch (const std::exception&) {
      // The excluded rank's wait has a deadline.
    }
  }
  SurvivorDone(const SurvivorDone&) = delete;
  SurvivorDone& operator=(const SurvivorDone&) = delete;

 private:
  RankContext& context_;
};

// The excluded rank: waits (polling, within the item's deadline) until
// every survivor is done with the parent and its shrunk communicator, then
// frees its own (aborting where it can when the survivors aborted theirs).
Outcome StandAside(RankContext& context, ccl::Communicator& comm, bool abort) {
  const auto deadline = Clock::now() + context.options.item_timeout;
  while (context.store->Add(SurvivorsDoneKey(context), 0) < context.world_size - 1) {
    if (Clock::now() > deadline) return Fail("the survivors never said they were done");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (abort && context.capabilities().abort()) {
    comm.Abort();
  } else {
    comm.Destroy();
  }
  return Pass();
}

// A broadcast of `count` from `root` on `comm`, checked; "" when right.
std::string BroadcastCheck(RankContext& context, const ccl::Communicator& comm, Position place,
                           int root, int64_t count) {
  const DLDataType dtype = ccl::dtype::kFloat32;
  const std::vector<double> values =
      InputValues(dtype, std::nullopt, place.rank, place.world_size, 0, count);
  ccl::DeviceBuffer buffer = Upload(context, dtype, values);
  comm.Broadcast(buffer.AsTensor(dtype, count), buffer.AsTensor(dtype, count), root,
                 context.stream);
  context.stream.Synchronize();
  return Judge({Collective::kBroadcast, dtype, std::nullopt, count, true}, place.world_size,
               ExpectBroadcast(dtype, place.world_size, root, count),
               Download(buffer, dtype, 0, static_cast<size_t>(count)));
}

// What a survivor must find on the communicator shrunk without `dropped`:
// its old rank less one when it was above `dropped`, of world_size - 1;
// members, by their own word through the new communicator, who are exactly
// the survivors in rank order; collectives that see exactly them. "" when
// right.
std::string CheckShrunk(RankContext& context, const ccl::Communicator& shrunk, int dropped) {
  const int survivors = context.world_size - 1;
  const int expected_rank = context.rank - (context.rank > dropped ? 1 : 0);
  if (shrunk.world_size() != survivors || shrunk.rank() != expected_rank) {
    return "the shrunk communicator has this rank as " + std::to_string(shrunk.rank()) + " of " +
           std::to_string(shrunk.world_size()) + ", expected " + std::to_string(expected_rank) +
           " of " + std::to_string(survivors);
  }
  std::vector<int> members;
  for (int rank = 0; rank < context.world_size; ++rank) {
    if (rank != dropped) members.push_back(rank);
  }
  const Position place{expected_rank, survivors};
  if (std::string wrong = CheckMembers(context, shrunk, place, members); !wrong.empty()) {
    return "the shrunk communicator: " + wrong;
  }
  if (std::string wrong = SumCheck(context, shrunk, place, 17); !wrong.empty()) {
    return "all_reduce on the shrunk communicator: " + wrong;
  }
  if (std::string wrong = BroadcastCheck(context, shrunk, place, survivors - 1, 9);
      !wrong.empty()) {
    return "broadcast on the shrunk communicator: " + wrong;
  }
  return "";
}

}  // namespace

// With 3 ranks or more a middle rank is dropped, so that the survivors
// above it must be renumbered; with 2, rank 0.
Outcome ShrinkDropsOneRank(RankContext& context) {
  ccl::Communicator comm = context.NewCommunicator(context.item_key);
  Watched watched(*context.watch, comm);
  const int dropped = context.world_size >= 3 ? 1 : 0;
  if (context.rank == dropped) return StandAside(context, comm, /*abort=*/false);
  std::string wrong;
  {
    SurvivorDone done(context);
    const int excluded[] = {dropped};
    ccl::Communicator shrunk = comm.Shrink(excluded);
    Watched watched_shrunk(*context.watch, shrunk);
    wrong = CheckShrunk(context, shrunk, dropped);
    shrunk.Destroy();
  }
  comm.Destroy();
  if (!wrong.empty()) return Fail(wrong);
  return Pass(std::to_string(context.world_size - 1) + " of " + std::to_string(context.world_size) +
              " ranks (rank " + std::to_string(dropped) +
              " dropped): members, all_reduce and broadcast on the shrunk communicator");
}

// The survivors have a receive from the last rank outstanding on another
// thread; the last rank never sends. Shrinking with the abort flag must end
// that receive and return, not wait for it.
Outcome ShrinkAbortsOutstanding(RankContext& context) {
  ccl::Communicator comm = context.NewCommunicator(context.item_key);
  Watched watched(*context.watch, comm);
  const int last = context.world_size - 1;
  if (context.rank == last) return StandAside(context, comm, /*abort=*/true);
  const DLDataType dtype = ccl::dtype::kFloat32;
  ccl::DeviceBuffer buffer = Upload(context, dtype, {}, 1);
  ccl::Stream pending_stream(context.backend);
  std::atomic<bool> entered{false};
  std::string how = "returned";
  std::thread pending([&] {
    try {
      context.ActivateDevice();
      entered = true;
      comm.Recv(buffer.AsTensor(dtype, 1), last, pending_stream);
      pending_stream.Synchronize();
    } catch (const ccl::Error& error) {
      how = std::string("failed with ") + ccl::ResultName(error.code());
    } catch (const std::exception& error) {
      how = std::string("failed: ") + error.what();
    }
    entered = true;
  });
  while (!entered.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // The receive has been issued; give it time to block.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = Clock::now();
  std::string wrong;
  int64_t shrink_ms = 0, pending_ms = 0;
  {
    SurvivorDone done(context);
    ccl::Communicator shrunk;
    try {
      const int excluded[] = {last};
      shrunk = comm.Shrink(excluded, ccl::ShrinkMode::kAbort);
    } catch (...) {
      pending.join();  // ended by the watch's abort at worst
      throw;
    }
    shrink_ms = MillisecondsSince(start);
    pending.join();
    pending_ms = MillisecondsSince(start);
    Watched watched_shrunk(*context.watch, shrunk);
    wrong = CheckShrunk(context, shrunk, last);
    shrunk.Destroy();
  }
  if (context.capabilities().abort()) {
    comm.Abort();
  } else {
    comm.Destroy();
  }
  if (!wrong.empty()) return Fail(wrong);
  return Pass("shrink returned after " + std::to_string(shrink_ms) + " ms; the pending recv " +
              how + " after " + std::to_string(pending_ms) + " ms");
}

// Every rank waits for a message nobody sends; another thread revokes the
// communicator; the wait must end (a blocking call with an error), and
// destroy must work.
Outcome RevokeUnblocks(RankContext& context) {
  ccl::Communicator comm = context.NewCommunicator(context.item_key);
  Watched watched(*context.watch, comm);
  const DLDataType dtype = ccl::dtype::kFloat32;
  ccl::DeviceBuffer buffer = Upload(context, dtype, {}, 1);
  std::atomic<bool> entered{false};
  std::atomic<bool> revoked{false};
  std::thread revoker([&] {
    while (!entered.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    revoked = true;
    comm.Revoke();
  });
  const auto start = Clock::now();
  std::string how;
  bool returned_after_revoke = false;
  try {
    entered = true;
    comm.Recv(buffer.AsTensor(dtype, 1), (context.rank + 1) % context.world_size, context.stream);
    // A blocking backend returns only once the message came or the call
    // was ended; an enqueueing one (NCCL) returns at once, and then its
    // stream is what must end.
    returned_after_revoke = revoked.load();
    context.stream.Synchronize();
  } catch (const ccl::Error& error) {
    how = std::string("failed with ") + ccl::ResultName(error.code());
  }
  entered = true;
  revoker.join();
  if (how.empty()) {
    if (returned_after_revoke && !context.watch->fired()) {
      return Fail("a recv from a peer that never sent returned success on a revoked communicator");
    }
    how = "was enqueued at once; its stream returned";
  }
  const int64_t waited = MillisecondsSince(start);
  comm.Destroy();
  return Pass("the pending recv " + how + " " + std::to_string(waited) +
              " ms after it began; destroy returned");
}

}  // namespace infini::conformance::internal
