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
// type and purpose), else what is wrong.
std::string Judge(const CaseSpec& spec, const std::vector<double>& expected,
                  const std::vector<double>& actual);

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

// api_items.cc: the items that are not one collective.
Outcome DeviceCount(RankContext& context);
Outcome Memory(RankContext& context);
Outcome StreamsAndEvents(RankContext& context);
Outcome UniqueIdThroughStore(RankContext& context);
Outcome WorldInit(RankContext& context);
Outcome RankAndCount(RankContext& context);
Outcome AsyncErrorWhenHealthy(RankContext& context);
Outcome BarrierOrders(RankContext& context);
Outcome GroupAggregates(RankContext& context);
Outcome RegisteredAllReduce(RankContext& context, bool window);
Outcome SplitHalves(RankContext& context);
Outcome MultiDeviceInit(RankContext& context);
Outcome NonBlockingInit(RankContext& context);
Outcome CaptureReplays(RankContext& context);
Outcome AbortUnblocks(RankContext& context);

// recovery_items.cc: shrink and revoke, where the plugin declares them.
Outcome ShrinkDropsLastRank(RankContext& context);
Outcome ShrinkAbortsOutstanding(RankContext& context);
Outcome RevokeUnblocks(RankContext& context);

}  // namespace infini::conformance::internal
