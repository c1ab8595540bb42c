// The list of items every rank runs, in order, and their verdicts' names.
#include "suite.h"

#include <functional>
#include <string>
#include <vector>

#include "suite_items.h"

namespace infini::conformance {

std::string_view VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kUnsupported:
      return "unsupported";
    case Verdict::kMissing:
      return "missing";
    case Verdict::kFail:
      return "FAIL";
  }
  return "?";
}

namespace {

using ccl::Collective;
using internal::Unsupported;

// The runtime items (one rank's device, memory, streams) run in any layout;
// every other item is unsupported when the layout is one the plugin
// declared it cannot serve.
void RefuseLayout(std::vector<Item>& items, const std::string& why) {
  for (Item& item : items) {
    if (item.name.rfind("runtime/", 0) == 0) continue;
    item.needs_world = false;
    item.makes_world = false;
    item.run = [why](RankContext&) { return Unsupported(why); };
  }
}

}  // namespace

std::vector<Item> BuildItems(const ccl::Capabilities& capabilities, int world_size,
                             int threads_per_process) {
  std::vector<Item> items;
  auto add = [&](std::string name, bool needs_world, std::function<Outcome(RankContext&)> run) {
    items.push_back(Item{std::move(name), needs_world, std::move(run)});
  };
  auto declared_or =
      [](bool declared, std::string why,
         std::function<Outcome(RankContext&)> run) -> std::function<Outcome(RankContext&)> {
    if (declared) return run;
    return [why](RankContext&) { return Unsupported(why); };
  };

  add("runtime/device_count", false, internal::DeviceCount);
  add("runtime/memory", false, internal::Memory);
  add("runtime/streams_and_events", false, internal::StreamsAndEvents);
  add("init/unique_id_through_store", false, internal::UniqueIdThroughStore);
  add("init/world", false, internal::WorldInit);
  items.back().makes_world = true;
  add("comm/rank_and_count", true, internal::RankAndCount);
  add("comm/async_error_when_healthy", true, internal::AsyncErrorWhenHealthy);

  const std::vector<Collective> reductions = {Collective::kAllReduce, Collective::kReduce,
                                              Collective::kReduceScatter,
                                              Collective::kReduceScatterV};
  const std::vector<Collective> movements = {
      Collective::kBroadcast, Collective::kAllGather,  Collective::kSend,   Collective::kAllToAll,
      Collective::kAllToAllV, Collective::kAllGatherV, Collective::kGather, Collective::kScatter};
  // For one type: reductions, each with every operator (ccl::IsReduction
  // says which take one), then data movement; in this order on every rank.
  auto add_collectives_of = [&](DLDataType dtype) {
    for (const auto* group : {&reductions, &movements}) {
      for (Collective collective : *group) {
        if (!capabilities.Implements(collective)) {
          // An optional entry the plugin leaves NULL: one row, not one per type.
          if (!ccl::operator==(dtype, ccl::dtype::kFloat32)) continue;
          add(std::string(ccl::CollectiveName(collective)), false, [](RankContext&) {
            return Unsupported("not implemented (an optional entry the plugin leaves NULL)");
          });
          continue;
        }
        if (!ccl::IsReduction(collective)) {
          items.push_back(
              internal::CollectiveItem(collective, dtype, std::nullopt, capabilities, world_size));
          continue;
        }
        for (ReduceOp op : AllReduceOps()) {
          if (!HasReference(dtype, op)) continue;  // average of bools means nothing
          items.push_back(
              internal::CollectiveItem(collective, dtype, op, capabilities, world_size));
        }
      }
    }
  };
  // float32 (every port must serve it) first, then the behaviour of
  // communicators, then bfloat16 and every other type: a port's first
  // runs, and --fail_fast, meet what matters most first.
  add_collectives_of(ccl::dtype::kFloat32);

  add("barrier", true, internal::BarrierOrders);
  add("group/two_all_reduce", capabilities.group(),
      declared_or(capabilities.group(), "no group entries (group_start/group_end are NULL)",
                  internal::GroupAggregates));
  add("register/all_reduce", capabilities.register_buffers(),
      declared_or(
          capabilities.register_buffers(), "comm_register is NULL",
          [](RankContext& context) { return internal::RegisteredAllReduce(context, false); }));
  add("register/window_all_reduce", capabilities.register_windows(),
      declared_or(
          capabilities.register_windows(), "comm_window_register is NULL",
          [](RankContext& context) { return internal::RegisteredAllReduce(context, true); }));
  add("split/permuted_keys", capabilities.split(),
      declared_or(capabilities.split(), "comm_split is NULL", internal::SplitPermutedKeys));
  add("init/multi_device", capabilities.multi_device_init(),
      declared_or(capabilities.multi_device_init(), "comm_init_ranks is NULL",
                  internal::MultiDeviceInit));
  add("init/non_blocking", capabilities.nonblocking(),
      declared_or(capabilities.nonblocking(), "INFINI_CCL_FEATURE_NONBLOCKING not declared",
                  internal::NonBlockingInit));
  add("capture/replay_all_reduce", capabilities.capture(),
      declared_or(capabilities.capture(), "no stream capture entries", internal::CaptureReplays));
  const bool abortable = capabilities.abort() && capabilities.abort_unblocks() && world_size > 1;
  add("abort/unblocks_recv", false,
      declared_or(abortable,
                  !capabilities.abort() ? "comm_abort is NULL"
                  : !capabilities.abort_unblocks()
                      ? "INFINI_CCL_FEATURE_ABORT_UNBLOCKS not declared"
                      : "needs 2 ranks",
                  internal::AbortUnblocks));
  // One rank plays the lost one: shrinking needs a survivor besides it.
  const auto recovery_why = [&](bool declared, const char* entry) {
    return !declared ? std::string(entry) + " is NULL" : std::string("needs 2 ranks");
  };
  add("shrink/drop_one_rank", false,
      declared_or(capabilities.shrink() && world_size > 1,
                  recovery_why(capabilities.shrink(), "comm_shrink"),
                  internal::ShrinkDropsOneRank));
  add("shrink/abort_outstanding", false,
      declared_or(capabilities.shrink() && world_size > 1,
                  recovery_why(capabilities.shrink(), "comm_shrink"),
                  internal::ShrinkAbortsOutstanding));
  add("failure/peer_killed", false, [](RankContext& context) {
    // A lost peer's pending call may only end by abort.
    if (!context.capabilities().abort()) return Unsupported("comm_abort is NULL");
    // The killed process needs a device of its own.
    const bool host = context.backend->info().device_type == kDLCPU;
    if (!host && context.backend->DeviceCount() <= context.world_size) {
      return Unsupported("needs a device no rank uses, for the process it kills");
    }
    return internal::PeerKilled(context);
  });
  add("revoke/unblocks_recv", false,
      declared_or(capabilities.revoke() && world_size > 1,
                  recovery_why(capabilities.revoke(), "comm_revoke"), internal::RevokeUnblocks));
  // bfloat16 next (what training moves besides float32), then the others.
  add_collectives_of(ccl::dtype::kBFloat16);
  for (DLDataType dtype : AllDataTypes()) {
    if (!ccl::operator==(dtype, ccl::dtype::kFloat32) &&
        !ccl::operator==(dtype, ccl::dtype::kBFloat16)) {
      add_collectives_of(dtype);
    }
  }
  if (capabilities.one_rank_per_process() && threads_per_process > 1) {
    RefuseLayout(items,
                 "the plugin allows one rank per process "
                 "(INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS); this layout has " +
                     std::to_string(threads_per_process) + " ranks per process");
  }
  return items;
}

}  // namespace infini::conformance
