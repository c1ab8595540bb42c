// The one description of each collective (c10d's OpType + opTypeToString,
// NCCL's ncclFunc_t + ncclFuncStr): its name, whether it reduces, whether
// it has an in-place form, and what its count means. ccl/'s capabilities,
// bench/, conformance/, parallel/ and the tools read it; none re-decides it.
//
// Adding a collective: a value in infiniCclCollective_t (plugin_abi_v2.h,
// with a case in infiniCclCollectiveReduces when it reduces), a row here,
// and its implementations (the plugin entry, Communicator's method).
#pragma once

#include <cstddef>
#include <iterator>
#include <optional>
#include <string_view>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl {

// Operation kinds; values match infiniCclCollective_t. The hot path carries
// these, names are for logs, debug mode and the watchdog.
enum class Collective {
  kAllReduce = infiniCclCollAllReduce,
  kBroadcast = infiniCclCollBroadcast,
  kReduce = infiniCclCollReduce,
  kAllGather = infiniCclCollAllGather,
  kReduceScatter = infiniCclCollReduceScatter,
  kSend = infiniCclCollSend,
  kRecv = infiniCclCollRecv,
  kAllToAll = infiniCclCollAllToAll,
  kBarrier = infiniCclCollBarrier,
  kAllToAllV = infiniCclCollAllToAllV,
  kAllGatherV = infiniCclCollAllGatherV,
  kReduceScatterV = infiniCclCollReduceScatterV,
  kGather = infiniCclCollGather,
  kScatter = infiniCclCollScatter,
};
inline constexpr int kNumCollectives = infiniCclNumCollectives;

// What the `count` of a collective's plugin entry means (element counts;
// `world` is the communicator's size).
enum class CountRule {
  kWholeBuffer,  // send and recv each hold count elements
  kPerRankSend,  // count is each rank's contribution; recv holds world × count
                 // (all_gather; gather's, at the root)
  kPerRankRecv,  // count is each rank's result; send holds world × count
                 // (reduce_scatter; scatter's, at the root)
  kPerPeer,      // count elements to or from each peer (send/recv: the one
                 // peer; all_to_all: send and recv hold world × count)
  kVariable,     // per-peer count and displacement arrays (the v-collectives)
  kNoBuffer,     // no data (barrier)
};

struct CollectiveInfo {
  Collective collective;
  std::string_view name;  // the plugin entry's name: "all_reduce", "all_to_all_v"
  bool reduces;           // takes a reduction operator
  // sendbuff == recvbuff is defined (NCCL's in-place: all_gather's send is
  // this rank's chunk of recv, reduce_scatter's recv this rank's chunk of send).
  bool in_place;
  CountRule count_rule;
};

// One row per collective, in the order of the enum (checked below).
inline constexpr CollectiveInfo kCollectiveTable[] = {
    // clang-format off
    // collective                  name                reduces in_place count_rule
    {Collective::kAllReduce,      "all_reduce",       true,   true,    CountRule::kWholeBuffer},
    {Collective::kBroadcast,      "broadcast",        false,  true,    CountRule::kWholeBuffer},
    {Collective::kReduce,         "reduce",           true,   true,    CountRule::kWholeBuffer},
    {Collective::kAllGather,      "all_gather",       false,  true,    CountRule::kPerRankSend},
    {Collective::kReduceScatter,  "reduce_scatter",   true,   true,    CountRule::kPerRankRecv},
    {Collective::kSend,           "send",             false,  false,   CountRule::kPerPeer},
    {Collective::kRecv,           "recv",             false,  false,   CountRule::kPerPeer},
    {Collective::kAllToAll,       "all_to_all",       false,  false,   CountRule::kPerPeer},
    {Collective::kBarrier,        "barrier",          false,  false,   CountRule::kNoBuffer},
    {Collective::kAllToAllV,      "all_to_all_v",     false,  false,   CountRule::kVariable},
    {Collective::kAllGatherV,     "all_gather_v",     false,  false,   CountRule::kVariable},
    {Collective::kReduceScatterV, "reduce_scatter_v", true,   false,   CountRule::kVariable},
    {Collective::kGather,         "gather",           false,  false,   CountRule::kPerRankSend},
    {Collective::kScatter,        "scatter",          false,  false,   CountRule::kPerRankRecv},
    // clang-format on
};

namespace collectives_detail {
constexpr bool RowsFollowTheEnum() {
  for (int c = 0; c < kNumCollectives; ++c) {
    if (static_cast<int>(kCollectiveTable[c].collective) != c) return false;
  }
  return true;
}
// The plugin's answer (a C function, since a plugin links nothing of ours)
// and the host's must agree.
constexpr bool ReducesAsTheAbiSays() {
  for (const CollectiveInfo& row : kCollectiveTable) {
    const auto abi = static_cast<infiniCclCollective_t>(row.collective);
    if (row.reduces != (infiniCclCollectiveReduces(abi) != 0)) return false;
  }
  return true;
}
constexpr bool NamesAreUniqueAndSet() {
  for (size_t i = 0; i < std::size(kCollectiveTable); ++i) {
    if (kCollectiveTable[i].name.empty()) return false;
    for (size_t j = 0; j < i; ++j) {
      if (kCollectiveTable[i].name == kCollectiveTable[j].name) return false;
    }
  }
  return true;
}
}  // namespace collectives_detail

static_assert(std::size(kCollectiveTable) == kNumCollectives,
              "kCollectiveTable needs one row per infiniCclCollective_t value");
static_assert(collectives_detail::RowsFollowTheEnum(),
              "kCollectiveTable's rows must be in the order of the enum");
static_assert(collectives_detail::ReducesAsTheAbiSays(),
              "kCollectiveTable's reduces column disagrees with infiniCclCollectiveReduces");
static_assert(collectives_detail::NamesAreUniqueAndSet(),
              "kCollectiveTable's names must be set and distinct");

// Whether `collective` is one of the enum's values (a cast from a plugin's
// or a file's integer may not be).
constexpr bool IsKnownCollective(Collective collective) {
  return static_cast<int>(collective) >= 0 && static_cast<int>(collective) < kNumCollectives;
}
// The row of a known collective.
constexpr const CollectiveInfo& CollectiveInfoOf(Collective collective) {
  return kCollectiveTable[static_cast<int>(collective)];
}
// "all_reduce", "all_to_all_v", ... (the plugin entry's name); "unknown" for
// a value outside the enum.
constexpr std::string_view CollectiveName(Collective collective) {
  return IsKnownCollective(collective) ? CollectiveInfoOf(collective).name : "unknown";
}
// Inverse of CollectiveName; nullopt for a name no collective has.
constexpr std::optional<Collective> ParseCollective(std::string_view name) {
  for (const CollectiveInfo& row : kCollectiveTable) {
    if (row.name == name) return row.collective;
  }
  return std::nullopt;
}
// Whether the collective takes a reduction operator.
constexpr bool IsReduction(Collective collective) {
  return IsKnownCollective(collective) && CollectiveInfoOf(collective).reduces;
}
// Whether sendbuff == recvbuff (or its chunk of it) is a defined call.
constexpr bool HasInPlaceForm(Collective collective) {
  return IsKnownCollective(collective) && CollectiveInfoOf(collective).in_place;
}
// What `count` means for a known collective.
constexpr CountRule CountRuleOf(Collective collective) {
  return CollectiveInfoOf(collective).count_rule;
}

}  // namespace infini::ccl
