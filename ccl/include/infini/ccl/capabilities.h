// What a loaded backend can do, asked of the plugin once when it loads, so
// that a call it cannot serve is refused before the plugin sees it.
#pragma once

#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>
#include <string_view>

#include "infini/ccl/collectives.h"
#include "infini/ccl/plugin_abi.h"

namespace infini::ccl {

enum class ReduceOp {
  kSum = infiniCclSum,
  kProd = infiniCclProd,
  kMax = infiniCclMax,
  kMin = infiniCclMin,
  kAvg = infiniCclAvg
};
inline constexpr int kNumReduceOps = infiniCclNumOps;
std::string_view ReduceOpName(ReduceOp op);
// Inverse of ReduceOpName; throws std::invalid_argument.
ReduceOp ParseReduceOp(std::string_view name);

// The element types the C++ API names (dtype.cc: ints, floats, fp8, bool),
// in a fixed order, so that capabilities fit a table.
inline constexpr int kNumKnownDataTypes = 15;
// Index of `dtype` among the known types, or -1.
int KnownDataTypeIndex(DLDataType dtype);
DLDataType KnownDataType(int index);

class Capabilities {
 public:
  Capabilities() = default;
  // Asks `plugin` (its entries and supports()) once.
  explicit Capabilities(const infiniCclPlugin_t& plugin);

  // The plugin has the entry for `collective` (optional ones may be NULL).
  bool Implements(Collective collective) const {
    return implemented_[static_cast<int>(collective)];
  }
  // Implemented and declared for this type (and operator, for reductions).
  bool Supports(Collective collective, DLDataType dtype, ReduceOp op = ReduceOp::kSum) const;

  bool nonblocking() const { return (features_ & INFINI_CCL_FEATURE_NONBLOCKING) != 0; }
  bool concurrent_init() const { return (features_ & INFINI_CCL_FEATURE_CONCURRENT_INIT) != 0; }
  bool abort_unblocks() const { return (features_ & INFINI_CCL_FEATURE_ABORT_UNBLOCKS) != 0; }
  bool device_sharing() const { return (features_ & INFINI_CCL_FEATURE_DEVICE_SHARING) != 0; }
  // At most one rank per process: thread layouts are refused.
  bool one_rank_per_process() const {
    return (features_ & INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS) != 0;
  }
  bool split() const { return split_; }
  bool abort() const { return abort_; }
  bool shrink() const { return shrink_; }  // comm_shrink (Communicator::Shrink)
  bool revoke() const { return revoke_; }  // comm_revoke (Communicator::Revoke)
  // comm_register and comm_deregister (Communicator::Register)
  bool register_buffers() const { return register_; }
  // comm_window_register and comm_window_deregister (Communicator::RegisterWindow)
  bool register_windows() const { return register_windows_; }
  // get_link_bandwidth (Backend::LinkBandwidth)
  bool link_bandwidth() const { return link_bandwidth_; }
  bool group() const { return group_; }
  bool capture() const { return capture_; }
  bool init_rank() const { return init_rank_; }           // one rank per call
  bool multi_device_init() const { return init_ranks_; }  // several ranks per call
  uint64_t features() const { return features_; }

 private:
  uint64_t features_ = 0;
  bool split_ = false, abort_ = false, group_ = false, capture_ = false;
  bool init_rank_ = false, init_ranks_ = false;
  bool shrink_ = false, revoke_ = false, register_ = false;
  bool register_windows_ = false, link_bandwidth_ = false;
  std::array<bool, kNumCollectives> implemented_{};
  // [collective][known dtype][op]; data movement uses op 0.
  std::array<std::array<std::array<bool, kNumReduceOps>, kNumKnownDataTypes>, kNumCollectives>
      supported_{};
};

}  // namespace infini::ccl
