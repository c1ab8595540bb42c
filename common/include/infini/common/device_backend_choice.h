// --device_backend (INFINI_CCL_DEVICE_BACKEND) as a choice per local rank,
// read by the launcher (to refuse a bad spelling once, before starting
// ranks) and by ccl/ in each rank (to stage through its own device):
//
//   nccl                      every local rank stages through nccl
//   0:arena,1:arena,2:other   local ranks 0 and 1 on arena, 2 on other
//   nccl,3:none               every local rank on nccl but 3, which is on the host
//
// An entry is NAME or LOCAL_RANK:NAME (torchrun's --redirects spelling);
// NAME is a plugin's name, a path to its library, or `none` (the rank's
// buffers are host memory: the transport alone, no staging). A local rank
// that no entry names takes the entry without a rank, else `none`.
#pragma once

#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

namespace infini::device_backend {

inline constexpr std::string_view kNone = "none";

struct Choice {
  std::string every_rank;              // the entry without a rank; "" when none was given
  std::map<int, std::string> by_rank;  // local rank -> its entry
};

inline bool IsPluginName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

// Throws std::invalid_argument saying what was wrong (without the variable's
// name: the caller names its flag or variable and the whole value).
inline Choice Parse(std::string_view text) {
  Choice choice;
  if (text.empty()) throw std::invalid_argument("expected a device backend, got nothing");
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view entry = text.substr(begin, end - begin);
    begin = end + 1;
    int local_rank = -1;
    const size_t colon = entry.find(':');
    if (colon != std::string_view::npos && colon > 0 &&
        entry.substr(0, colon).find_first_not_of("0123456789") == std::string_view::npos) {
      const std::string digits(entry.substr(0, colon));
      if (digits.size() > 6) {
        throw std::invalid_argument("local rank " + digits + " is too large");
      }
      local_rank = std::atoi(digits.c_str());
      entry = entry.substr(colon + 1);
    }
    const std::string name(entry);
    if (!IsPluginName(name) && name.find('/') == std::string::npos) {
      throw std::invalid_argument(
          "entry '" + name +
          "': expected a device backend's name (nccl, or another plugin's), a path to its "
          "library, or none, optionally after LOCAL_RANK: (0:nccl,1:none)");
    }
    if (local_rank < 0) {
      if (!choice.every_rank.empty()) {
        throw std::invalid_argument("two entries without a local rank ('" + choice.every_rank +
                                    "' and '" + name + "'): expected at most one");
      }
      choice.every_rank = name;
    } else if (!choice.by_rank.emplace(local_rank, name).second) {
      throw std::invalid_argument("local rank " + std::to_string(local_rank) +
                                  " is named twice: expected one entry per local rank");
    }
    if (end == text.size()) break;
  }
  return choice;
}

// Whether any local rank stages through a device: then a rank on `none` is
// a host rank of a mixed job (ccl/ chunks its collectives as staged ranks do).
inline bool NamesADevice(const Choice& choice) {
  if (!choice.every_rank.empty() && choice.every_rank != kNone) return true;
  for (const auto& [local_rank, name] : choice.by_rank) {
    if (name != kNone) return true;
  }
  return false;
}

// The device backend of `local_rank`: a name or path, or "" for none.
inline std::string For(const Choice& choice, int local_rank) {
  const auto found = choice.by_rank.find(local_rank);
  const std::string& name = found != choice.by_rank.end() ? found->second : choice.every_rank;
  return name == kNone ? std::string() : name;
}

}  // namespace infini::device_backend
