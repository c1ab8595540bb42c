// What the items of ccl_conformance share: their verdicts, device buffers
// filled from and read back to host values, and one checked case. suite.cc
// lists the items; collective_items.cc and api_items.cc make them.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/conformance/reference.h"
#include "suite.h"

namespace infini::conformance::internal {

using ccl::Collective;

inline Outcome Pass(std::string detail = "") { return {Verdict::kPass, std::move(detail), false}; }
inline Outcome Unsupported(std::string detail) {
  return {Verdict::kUnsupported, std::move(detail), false};
}
inline Outcome Fail(std::string detail) { return {Verdict::kFail, std::move(detail), false}; }

// A buffer of max(values, capacity_elements) elements on the rank's device:
// `values` first, a sentinel in whatever the collective must not touch.
ccl::DeviceBuffer Upload(const RankContext& context, DLDataType dtype,
                         const std::vector<double>& values, size_t capacity_elements = 0);
// Writes `values` into `buffer` from element `offset_elements` on.
void Place(const ccl::DeviceBuffer& buffer, DLDataType dtype, const std::vector<double>& values,
           size_t offset_elements);
// `count` elements of `buffer` from `offset_elements` on, as host values.
std::vector<double> Download(const ccl::DeviceBuffer& buffer, DLDataType dtype,
                             size_t offset_elements, size_t count);

// One call of a collective on the world, checked. Returns "" when right,
// else what is wrong on this rank.
struct CaseSpec {
  Collective collective;
  DLDataType dtype;
  Purpose purpose;  // the operator, or nullopt for moved data
  int64_t count;
  bool in_place;
};

// "" when `actual` is `expected` (as the reference compares for the case's
// type and purpose over `world_size` ranks), else what is wrong.
std::string Judge(const CaseSpec& spec, int world_size, const std::vector<double>& expected,
                  const std::vector<double>& actual);

// `elements` sentinel elements of `dtype`, as bytes.
std::vector<unsigned char> SentinelBytes(DLDataType dtype, size_t elements);

// A buffer of `elements` on the rank's device between two guard regions of
// sentinels: `values` first, a sentinel in the rest. The tensors a call
// sees are views of the middle; what the call wrote outside it shows.
class GuardedBuffer {
 public:
  static constexpr size_t kGuardBytes = 256;

  GuardedBuffer(const RankContext& context, DLDataType dtype, size_t elements,
                const std::vector<double>& values = {});

  ccl::FlatTensor Tensor(int64_t count, int64_t offset_elements = 0) const;
  void Place(const std::vector<double>& values, size_t offset_elements) const;
  // The whole buffer, guards included, as bytes (one read: checks below).
  std::vector<unsigned char> Bytes() const;
  std::vector<double> Values(const std::vector<unsigned char>& bytes, size_t offset,
                             size_t count) const;
  // "" when both guards still hold their sentinel; else which one was
  // written, naming the buffer.
  std::string GuardProblem(const std::vector<unsigned char>& bytes, const char* name) const;
  // "" when the middle starts with exactly `values`; else the first change.
  std::string ChangedFrom(const std::vector<unsigned char>& bytes,
                          const std::vector<double>& values) const;

 private:
  DLDataType dtype_;
  size_t width_;
  size_t guard_elements_;
  ccl::DeviceBuffer buffer_;
};

// Waits for the work enqueued on the rank's stream through an event
// recorded after it (synchronized or polled, by `case_number`'s parity),
// never the stream's synchronize: the data is read right after the event
// says done, so an event that says done too early is caught.
void AwaitCompletion(RankContext& context, int64_t case_number);

// collective_items.cc: one collective on one type (and operator), at every
// count of the options, out of place and, where the collective has one
// (ccl::HasInPlaceForm), in place; or the row saying why it is not run.
Item CollectiveItem(Collective collective, DLDataType dtype, std::optional<ReduceOp> op,
                    const ccl::Capabilities& capabilities, int world_size);

// Where this rank stands in a communicator, as the suite laid it out.
struct Position {
  int rank;
  int world_size;
};

// A float32 sum all_reduce of `count` on `comm`, checked against `place`
// (api_items.cc). `settled`, when given, runs between the enqueue and the
// stream's synchronization: a non-blocking communicator's call may still be
// in progress (not yet on the stream) when it returns.
std::string SumCheck(RankContext& context, const ccl::Communicator& comm, Position place,
                     int64_t count, const std::function<void()>& settled = {});

// "" when the members of `comm`, each saying its global rank through `comm`
// itself (an all_gather), are `expected` in that order; else who is where.
// `place` is where this rank must stand in `comm`.
std::string CheckMembers(RankContext& context, const ccl::Communicator& comm, Position place,
                         const std::vector<int>& expected);

// api_items.cc: the items that are not one collective.
Outcome DeviceCount(RankContext& context);
Outcome Memory(RankContext& context);
Outcome StreamsAndEvents(RankContext& context);
Outcome HostFlags(RankContext& context);
Outcome HostFlagWrites(RankContext& context);
Outcome UniqueIdThroughStore(RankContext& context);
Outcome WorldInit(RankContext& context);
Outcome RankAndCount(RankContext& context);
Outcome AsyncErrorWhenHealthy(RankContext& context);
Outcome BarrierOrders(RankContext& context);
Outcome GroupAggregates(RankContext& context);
Outcome RegisteredAllReduce(RankContext& context, bool window);
Outcome SplitPermutedKeys(RankContext& context);
Outcome MultiDeviceInit(RankContext& context);
Outcome NonBlockingInit(RankContext& context);
Outcome CaptureReplays(RankContext& context);
Outcome AbortUnblocks(RankContext& context);

// recovery_items.cc: shrink and revoke, where the plugin declares them.
Outcome ShrinkDropsOneRank(RankContext& context);
Outcome ShrinkAbortsOutstanding(RankContext& context);
Outcome RevokeUnblocks(RankContext& context);

// failure_items.cc: a peer killed in the middle of a collective, and the
// killed peer's side (ccl_conformance --victim_of=KEY).
Outcome PeerKilled(RankContext& context);
int RunVictim(const std::string& key, int nranks, const std::string& backend_name);

}  // namespace infini::conformance::internal
