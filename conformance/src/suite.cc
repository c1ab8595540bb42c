// The list of items every rank runs, in order, and their verdicts' names.
#include "suite.h"

#include <functional>
#include <stdexcept>
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
    item.declared = false;
    item.run = [why](RankContext&) { return Unsupported(why); };
  }
}

}  // namespace

std::vector<Item> BuildItems(const ccl::Capabilities& capabilities, int world_size,
                             int threads_per_process, bool spare_device) {
  std::vector<Item> items;
  // Set by declared_or for the add() it is an argument of.
  bool next_undeclared = false;
  auto add = [&](std::string name, bool needs_world, std::function<Outcome(RankContext&)> run) {
    items.push_back(Item{std::move(name), needs_world, std::move(run)});
    items.back().declared = !next_undeclared;
    next_undeclared = false;
  };
  auto declared_or =
      [&next_undeclared](
          bool declared, std::string why,
          std::function<Outcome(RankContext&)> run) -> std::function<Outcome(RankContext&)> {
    if (declared) return run;
    next_undeclared = true;
    return [why](RankContext&) { return Unsupported(why); };
  };

  add("runtime/device_count", false, internal::DeviceCount);
  add("runtime/memory", false, internal::Memory);
  add("runtime/streams_and_events", false, internal::StreamsAndEvents);
  add("runtime/host_flags", false, internal::HostFlags);
  add("runtime/host_flag_writes", false, internal::HostFlagWrites);
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
  // A lost peer's pending call may only end by abort; the killed process
  // needs a device of its own.
  add("failure/peer_killed", false,
      declared_or(capabilities.abort() && spare_device,
                  !capabilities.abort() ? "comm_abort is NULL"
                                        : "needs a device no rank uses, for the process it kills",
                  internal::PeerKilled));
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

std::vector<std::string> AgreeOnItems(std::vector<Item>& items, rendezvous::Store& store,
                                      const std::string& key, int process, int processes,
                                      const std::string& backend_name) {
  std::vector<std::string> backends(static_cast<size_t>(processes), backend_name);
  if (processes < 2) return backends;
  // "<backend>\n<one 0/1 per item>\n<names>": names only to compare lists.
  std::string declared, names;
  for (const Item& item : items) {
    declared += item.declared ? '1' : '0';
    names += item.name + ",";
  }
  store.Set(key + "/" + std::to_string(process), backend_name + "\n" + declared + "\n" + names);
  std::vector<std::string> why_not(items.size());
  for (int other = 0; other < processes; ++other) {
    if (other == process) continue;
    const std::string theirs = store.Get(key + "/" + std::to_string(other));
    const size_t first = theirs.find('\n');
    const size_t second = theirs.find('\n', first + 1);
    const std::string their_backend = theirs.substr(0, first);
    backends[static_cast<size_t>(other)] = their_backend;
    if (first == std::string::npos || second == std::string::npos ||
        theirs.substr(second + 1) != names) {
      throw std::runtime_error("process " + std::to_string(other) + " (backend " + their_backend +
                               ") runs other items than process " + std::to_string(process) +
                               " (backend " + backend_name +
                               "): expected backends with the same collectives in one job");
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (theirs[first + 1 + i] == '0' && items[i].declared && why_not[i].empty()) {
        why_not[i] = "not declared by process " + std::to_string(other) + "'s backend " +
                     their_backend + " (a mixed job)";
      }
    }
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (why_not[i].empty()) continue;
    items[i].declared = false;
    items[i].needs_world = false;
    items[i].makes_world = false;
    items[i].run = [why = why_not[i]](RankContext&) { return Unsupported(why); };
  }
  return backends;
}

}  // namespace infini::conformance
