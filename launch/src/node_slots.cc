#include "node_slots.h"

#include <sstream>

#include "infini/common/rank_layout.h"
#include "infini/rendezvous/store.h"
#include "rendezvous_protocol.h"

namespace infini::launch {
namespace {

using rendezvous::Store;

constexpr char kLossCount[] = "node_loss/count";
constexpr char kJoinCount[] = "node_join/count";

std::string LossKey(int64_t number) { return Key("node_loss/" + std::to_string(number)); }
std::string JoinKey(int64_t number) { return Key("node_join/" + std::to_string(number)); }

// The first `count` lines of `text`, then the rest (which may hold none).
std::vector<std::string> SplitLines(const std::string& text, size_t count) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (fields.size() < count) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) break;
    fields.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  fields.push_back(start <= text.size() ? text.substr(start) : "");
  return fields;
}

bool IsNumber(const std::string& text) {
  return !text.empty() && text.size() < 10 &&
         text.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

void NodeSlots::Update(Store& store) {
  const int64_t losses = store.Add(Key(kLossCount), 0);
  for (auto number = static_cast<int64_t>(losses_.size()) + 1; number <= losses; ++number) {
    // Numbered by Add before written: a moment may pass until it is.
    if (!store.Check({LossKey(number)})) break;
    const std::vector<std::string> fields = SplitLines(store.Get(LossKey(number)), 3);
    const auto notice = loss_notice::Parse(fields.back());
    if (fields.size() != 4 || !IsNumber(fields[0]) || !IsNumber(fields[2]) || !notice) break;
    losses_.push_back({std::stoi(fields[0]), fields[1], std::stoi(fields[2]), *notice});
  }
  const int64_t joins = store.Add(Key(kJoinCount), 0);
  for (auto number = static_cast<int64_t>(joins_.size()) + 1; number <= joins; ++number) {
    if (!store.Check({JoinKey(number)})) break;
    const std::vector<std::string> fields = SplitLines(store.Get(JoinKey(number)), 3);
    const auto notice = loss_notice::Parse(fields.back());
    if (fields.size() != 4 || !IsNumber(fields[0]) || !notice) break;
    joins_.push_back({std::stoi(fields[0]), fields[1], fields[2], *notice});
  }
}

std::vector<int> NodeSlots::RanksOf(int node_rank) const {
  for (auto join = joins_.rbegin(); join != joins_.rend(); ++join) {
    if (join->node_rank == node_rank) return join->notice.global_ranks;
  }
  return RankLayout{nnodes_, processes_per_node_, node_rank}.ProcessRanksOfNode();
}

void AppendNodeLoss(Store& store, const NodeLossEntry& entry) {
  const int64_t number = store.Add(Key(kLossCount), 1);
  store.Set(LossKey(number), std::to_string(entry.node_rank) + "\n" + entry.owner + "\n" +
                                 std::to_string(entry.ranks_left) + "\n" +
                                 loss_notice::Format(entry.notice));
}

void AppendNodeJoin(Store& store, const NodeJoinEntry& entry) {
  const int64_t number = store.Add(Key(kJoinCount), 1);
  store.Set(JoinKey(number), std::to_string(entry.node_rank) + "\n" + entry.owner + "\n" +
                                 entry.host + "\n" + loss_notice::Format(entry.notice));
}

std::string RanksText(const std::vector<int>& ranks) {
  if (ranks.empty()) return "";
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i) contiguous = contiguous && ranks[i] == ranks[i - 1] + 1;
  if (contiguous) {
    return ranks.size() == 1 ? std::to_string(ranks[0])
                             : std::to_string(ranks.front()) + ".." + std::to_string(ranks.back());
  }
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  return text;
}

}  // namespace infini::launch
