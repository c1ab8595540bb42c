// The groups of the meeting that bin/meeting_scale plays: R ranks on N nodes
// in Megatron's order (TP fastest, then DP, then PP), a world group and every
// TP, DP and PP group of more than one rank.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace infini::rendezvous::meeting {

struct Layout {
  int ranks, ranks_per_node, nodes, tp, dp, pp;
  int NodeOf(int rank) const { return rank / ranks_per_node; }
};

// A group: its store name and its members (the root is the first).
struct Group {
  std::string name;
  std::vector<int> members;
};

inline std::vector<Group> GroupsOf(const Layout& layout) {
  std::vector<Group> groups;
  Group world{"world", {}};
  for (int rank = 0; rank < layout.ranks; ++rank) world.members.push_back(rank);
  groups.push_back(world);
  std::map<std::string, Group> by_name;
  for (int rank = 0; rank < layout.ranks; ++rank) {
    const int tp_index = rank % layout.tp;
    const int dp_index = (rank / layout.tp) % layout.dp;
    const int pp_index = rank / (layout.tp * layout.dp);
    for (const std::string& name :
         {"tp/" + std::to_string(dp_index) + "." + std::to_string(pp_index),
          "dp/" + std::to_string(tp_index) + "." + std::to_string(pp_index),
          "pp/" + std::to_string(tp_index) + "." + std::to_string(dp_index)}) {
      Group& group = by_name[name];
      group.name = name;
      group.members.push_back(rank);
    }
  }
  for (auto& [name, group] : by_name) {
    if (group.members.size() > 1) groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace infini::rendezvous::meeting
