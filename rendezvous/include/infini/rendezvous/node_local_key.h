// Keys that stay on their node: where each node's launcher relays the store
// for its ranks (docs/rendezvous.md, "Relay"), a key with a segment
// "node-local" is answered by the node's relay and never goes upstream. Only
// the ranks of one node may use such a key (parallel/ puts there the keys of
// groups whose members all live on one node); without a relay (one node, or
// --rdzv_conf=relay=0) the same keys live in the run's store, where keys of
// different nodes' groups do not meet (a group's key names its members).
#pragma once

#include <algorithm>
#include <string_view>

namespace infini::rendezvous {

inline constexpr std::string_view kNodeLocalSegment = "node-local";

// Whether `key` has the segment kNodeLocalSegment ("node-local/...",
// ".../node-local/...").
inline bool IsNodeLocalKey(std::string_view key) {
  for (size_t start = 0; start <= key.size();) {
    const size_t end = std::min(key.find('/', start), key.size());
    if (key.substr(start, end - start) == kNodeLocalSegment) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace infini::rendezvous
