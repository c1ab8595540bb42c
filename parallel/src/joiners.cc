// Admitting joiners into a shrinking run (docs/parallel.md, "Joiners"): the
// survivors' side (Context::AdmitJoiners) and the joiner's
// (Context::WaitToBeAdmitted), meeting through the keys of
// infini/common/loss_notice.h ("Joins").
#include <algorithm>
#include <map>

#include "group_creation.h"
#include "group_state.h"
#include "infini/ccl/trace.h"
#include "infini/common/loss_notice.h"
#include "infini/parallel/context.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/logging.h"
#include "infini/parallel/process_group.h"
#include "infini/rendezvous/store.h"
#include "loss_watcher.h"
#include "run_store.h"

namespace infini::parallel {
namespace {

std::string List(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ",") + std::to_string(rank);
  return text;
}

// What the new global rank 0 tells the joiners of one admission.
struct Admission {
  int generation = 0;
  int64_t joins = 0;        // join notices the world has taken in, this one included
  std::vector<int> world;   // launch ranks, in new rank order
  std::vector<int> joined;  // those admitted now
  std::vector<int> lost;    // lost so far
};

std::string FormatAdmission(const Admission& admission) {
  return "generation=" + std::to_string(admission.generation) +
         " joins=" + std::to_string(admission.joins) + " world=" + List(admission.world) +
         " joined=" + List(admission.joined) + " lost=" + List(admission.lost);
}

std::optional<std::vector<int>> ParseList(const std::string& text) {
  std::vector<int> ranks;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string number = text.substr(start, end - start);
    if (number.empty() || number.size() > 9 ||
        number.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    ranks.push_back(std::stoi(number));
    start = end + 1;
  }
  return ranks;
}

std::optional<Admission> ParseAdmission(const std::string& text) {
  std::map<std::string, std::string> fields;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string field = text.substr(start, end - start);
    const size_t equals = field.find('=');
    if (equals == std::string::npos) return std::nullopt;
    fields[field.substr(0, equals)] = field.substr(equals + 1);
    start = end + 1;
  }
  for (const char* name : {"generation", "joins", "world", "joined", "lost"}) {
    if (!fields.count(name)) return std::nullopt;
  }
  Admission admission;
  const auto generation = ParseList(fields["generation"]);
  const auto joins = ParseList(fields["joins"]);
  const auto world = ParseList(fields["world"]);
  const auto joined = ParseList(fields["joined"]);
  const auto lost = ParseList(fields["lost"]);
  if (!generation || generation->size() != 1 || !joins || joins->size() != 1 || !world ||
      world->empty() || !joined || !lost) {
    return std::nullopt;
  }
  admission.generation = (*generation)[0];
  admission.joins = (*joins)[0];
  admission.world = *world;
  admission.joined = *joined;
  admission.lost = *lost;
  return admission;
}

// Whether `members` are 0, 1, ..., n-1: a group of the whole world in its
// order, which an admission can remake with the joiners after them.
bool InWorldOrder(const std::vector<int>& members) {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] != static_cast<int>(i)) return false;
  }
  return true;
}

// The largest of every world rank's `value` (one small max all-reduce,
// staged through the backend's memory where it is not the host's).
int64_t MaxOverWorld(ProcessGroup& world, int64_t value) {
  const std::shared_ptr<const ccl::Backend>& backend = world.backend();
  if (backend->info().device_type == kDLCPU) {
    const ccl::FlatTensor tensor(&value, ccl::dtype::kInt64, 1, DLDevice{kDLCPU, 0});
    world.AllReduce(tensor.dl(), tensor.dl(), ccl::ReduceOp::kMax);
    return value;
  }
  ccl::DeviceBuffer staging(backend, sizeof(value));
  staging.CopyFromHost(&value, sizeof(value));
  const ccl::FlatTensor tensor = staging.AsTensor(ccl::dtype::kInt64, 1);
  world.AllReduce(tensor.dl(), tensor.dl(), ccl::ReduceOp::kMax);
  staging.CopyToHost(&value, sizeof(value));
  return value;
}

}  // namespace

std::optional<GrownWorld> Context::AdmitJoiners(ProcessGroup& world) {
  if (!settings_.shrink_on_failure) return std::nullopt;  // only shrinking runs take joiners
  if (joining_) {
    throw ParallelUsageError(
        "AdmitJoiners: this rank is itself joining (INFINI_JOINING): expected "
        "WaitToBeAdmitted first");
  }
  if (rank_.threads_per_process() > 1) {
    throw ParallelUsageError(
        "AdmitJoiners: threads_per_process=" + std::to_string(rank_.threads_per_process()) +
        ": expected 1 (joiners are numbered by process)");
  }
  if (!world.is_member() || world.size() != rank_.world_size()) {
    throw ParallelUsageError("AdmitJoiners: process group '" + world.name() + "' has " +
                             std::to_string(world.size()) + " ranks: expected a group of the " +
                             "whole world (" + std::to_string(rank_.world_size()) + " ranks)");
  }
  const int64_t trace_begin = ccl::trace::Enabled() ? ccl::trace::NowNs() : 0;
  // Rank 0 reads the count (one store call per boundary for the whole
  // world) and the all-reduce hands it to every rank, so that they all
  // remake the same groups.
  const int64_t seen =
      rank_.global_rank() == 0 ? store_->Add(loss_notice::kJoinCountKey, 0) : joins_admitted_;
  const int64_t agreed = MaxOverWorld(world, seen);
  if (agreed <= joins_admitted_) return std::nullopt;

  Admission admission;
  admission.joins = agreed;
  admission.generation = world_generation_ + 1;
  for (int64_t n = joins_admitted_ + 1; n <= agreed; ++n) {
    const std::string text = store_->Get(loss_notice::JoinNoticeKey(n));
    const std::optional<loss_notice::LossNotice> notice = loss_notice::Parse(text);
    if (!notice) {
      throw ParallelError(rank_.ToString() + ": join notice " + std::to_string(n) +
                          " is not one infini_run writes: '" + text + "'");
    }
    admission.joined.insert(admission.joined.end(), notice->global_ranks.begin(),
                            notice->global_ranks.end());
  }
  admission.world = launch_rank_of_;
  admission.world.insert(admission.world.end(), admission.joined.begin(), admission.joined.end());
  admission.lost.assign(excluded_.begin(), excluded_.end());
  const int old_world_size = rank_.world_size();
  const int new_world_size = static_cast<int>(admission.world.size());
  const Rank renumbered = rank_.Renumbered(rank_.global_rank(), new_world_size);
  // Before anything is written or changed: remade, such a group would
  // number its members anew, so refuse rather than reorder it under the
  // program (every rank holds the same groups, so every rank refuses).
  for (const internal::GroupState* group : groups_->Groups()) {
    if (static_cast<int>(group->members.size()) == old_world_size &&
        !InWorldOrder(group->members)) {
      throw ParallelError(rank_.ToString() + ": process group '" + group->name + "' holds the " +
                          "whole world in another order [" + internal::MemberList(group->members) +
                          "]: expected 0.." + std::to_string(old_world_size - 1) +
                          " in order to admit joiners (make it anew after the admission)");
    }
  }
  if (rank_.global_rank() == 0) {
    // Before any remake: the joiners must know their place to make the group.
    for (int64_t n = joins_admitted_ + 1; n <= agreed; ++n) {
      store_->Set(loss_notice::AdmittedKey(n), FormatAdmission(admission));
    }
  }
  for (internal::GroupState* group : groups_->Groups()) {
    if (static_cast<int>(group->members.size()) != old_world_size) {
      // Its members keep their numbers: only the world it counts in grew.
      group->environment.rank = renumbered;
      group->environment.world_generation = admission.generation;
      continue;
    }
    try {
      internal::RemakeGroupForJoiners(*group, new_world_size, renumbered, admission.generation);
    } catch (const ccl::Error& error) {
      throw ParallelError(rank_.ToString() + ": remaking process group '" + group->name +
                          "' for the joiners " + List(admission.joined) +
                          " failed: " + error.what());
    }
  }
  if (ccl::trace::Enabled()) {
    ccl::trace::RecordFault(rank_.launch_global_rank(), ccl::trace::Category::kRecovery,
                            "admit_joiners", world.name(),
                            ccl::trace::Facts()
                                .Add("joined_ranks", admission.joined)
                                .Add("old_world_size", old_world_size)
                                .Add("new_world_size", new_world_size)
                                .Add("new_rank", renumbered.global_rank())
                                .Add("generation", admission.generation),
                            trace_begin, ccl::trace::NowNs());
  }
  rank_ = renumbered;
  launch_rank_of_ = admission.world;
  world_generation_ = admission.generation;
  joins_admitted_ = agreed;
  SetLogIdentity(rank_);
  if (settings_.debug != DebugLevel::kOff) {
    INFINI_LOG(INFO) << "admitted rank(s) " << List(admission.joined) << ": now "
                     << rank_.ToString();
  }
  return GrownWorld{new_world_size, rank_.global_rank(), admission.joined, admission.generation};
}

GrownWorld Context::WaitToBeAdmitted() {
  if (!joining_) {
    throw ParallelUsageError(
        "WaitToBeAdmitted: expected a joining rank (INFINI_JOINING, set by infini_run on a "
        "node that joins a shrinking run) not yet admitted");
  }
  if (rank_.threads_per_process() > 1) {
    throw ParallelUsageError(
        "WaitToBeAdmitted: threads_per_process=" + std::to_string(rank_.threads_per_process()) +
        ": expected 1 (joiners are numbered by process)");
  }
  const int64_t trace_begin = ccl::trace::Enabled() ? ccl::trace::NowNs() : 0;
  const std::string key = loss_notice::AdmittedKey(settings_.join_notice);
  std::string text;
  try {
    // The survivors admit at their next step boundary: the wait is bounded
    // as a collective is.
    const std::shared_ptr<rendezvous::Store> store = internal::ConnectRunStore(
        store_host_, store_port_, settings_.timeout, store_token_, key_namespace(), settings_);
    text = store->Get(key);
  } catch (const rendezvous::StoreTimeoutError&) {
    throw ParallelError(
        rank_.ToString() + ": not admitted within INFINI_CCL_TIMEOUT_S=" +
        std::to_string(
            std::chrono::duration_cast<std::chrono::seconds>(settings_.timeout).count()) +
        " s: the survivors admit joiners at their step boundaries (Context::AdmitJoiners); "
        "does the program call it?");
  }
  const std::optional<Admission> admission = ParseAdmission(text);
  const int me = rank_.launch_global_rank();
  const auto place = admission ? std::find(admission->world.begin(), admission->world.end(), me)
                               : std::vector<int>::const_iterator{};
  if (!admission || place == admission->world.end()) {
    throw ParallelError(rank_.ToString() + ": the admission of join notice " +
                        std::to_string(settings_.join_notice) + " does not place launch rank " +
                        std::to_string(me) + ": '" + text + "'");
  }
  rank_ = rank_.Renumbered(static_cast<int>(place - admission->world.begin()),
                           static_cast<int>(admission->world.size()));
  launch_rank_of_ = admission->world;
  excluded_.clear();
  excluded_.insert(admission->lost.begin(), admission->lost.end());
  world_generation_ = admission->generation;
  joins_admitted_ = admission->joins;
  joining_ = false;
  // Watches from here: losses before the admission are the survivors' past.
  StartLossWatcher(excluded_);
  SetLogIdentity(rank_);
  if (ccl::trace::Enabled()) {
    ccl::trace::RecordFault(me, ccl::trace::Category::kRecovery, "wait_to_be_admitted", "",
                            ccl::trace::Facts()
                                .Add("joined_ranks", admission->joined)
                                .Add("world_size", rank_.world_size())
                                .Add("rank", rank_.global_rank())
                                .Add("generation", admission->generation),
                            trace_begin, ccl::trace::NowNs());
  }
  return GrownWorld{rank_.world_size(), rank_.global_rank(), admission->joined,
                    admission->generation};
}

}  // namespace infini::parallel
