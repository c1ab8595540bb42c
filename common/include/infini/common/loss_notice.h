// The loss notice of `infini_run --on_failure=shrink`: the launcher that saw
// a rank die writes it into the ranks' store, parallel/ reads it to learn who
// was lost (docs/launcher.md, "In-place recovery"). The writer and the reader
// share these keys and this text, so they live here once.
//
// Keys, under the ranks' namespace "<run_id>/<restart_count>/":
//   loss/count  the number of notices so far (a store counter: Add)
//   loss/<n>    notice n (1, 2, ...): "ranks=1,4 at_ms=1700000000123 how=<text>"
// A notice's number is taken with Add before its key is written, so a reader
// that sees the count may wait a moment for the key.
//
// Joins (a replacement node arriving while a shrinking run goes on) use the
// same text under their own keys; the joiner's launcher writes them:
//   join/next_rank   counter: launch ranks given to joiners so far; a node
//                    takes its block with Add(kJoinNextRankKey, ranks) and
//                    numbers them from WORLD_SIZE-at-start + (result - ranks)
//   join/count       the number of join notices so far
//   join/<n>         notice n: "ranks=3,4 at_ms=... how=<node, host>"
// and its ranks start with INFINI_JOINING=<n> (common/launch_env.h) and
// the variables of a node numbered after every other: WORLD_SIZE (and the
// process world size) = WORLD_SIZE-at-start + join/next_rank, NNODES = that
// / ranks per node, RANK = its launch rank, GROUP_RANK (and the node rank)
// = RANK / ranks per node, so that parallel/'s block numbering holds. The
// survivors admit joiners at a step boundary (parallel's
// Context::AdmitJoiners); their new global rank 0 then writes, for each
// notice it admitted,
//   join/<n>/admitted  "generation=<g> world=<launch ranks in new rank order>
//                       lost=<launch ranks lost so far>"
// which the joining ranks wait for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infini::loss_notice {

inline constexpr const char* kCountKey = "loss/count";

inline std::string NoticeKey(int64_t number) { return "loss/" + std::to_string(number); }

inline constexpr const char* kJoinNextRankKey = "join/next_rank";
inline constexpr const char* kJoinCountKey = "join/count";
inline std::string JoinNoticeKey(int64_t number) { return "join/" + std::to_string(number); }
inline std::string AdmittedKey(int64_t number) { return JoinNoticeKey(number) + "/admitted"; }

struct LossNotice {
  std::vector<int> global_ranks;  // the launcher's numbering (RANK), ascending
  int64_t unix_ms = 0;            // when the launcher saw it
  std::string how;                // "killed by SIGKILL (exit status 137)"; one line
};

inline std::string Format(const LossNotice& notice) {
  std::string text = "ranks=";
  for (size_t i = 0; i < notice.global_ranks.size(); ++i) {
    text += (i == 0 ? "" : ",") + std::to_string(notice.global_ranks[i]);
  }
  text += " at_ms=" + std::to_string(notice.unix_ms) + " how=";
  for (char c : notice.how) text += (c == '\n' || c == '\r') ? ' ' : c;
  return text;
}

// Nothing for a text that is not a notice.
inline std::optional<LossNotice> Parse(const std::string& text) {
  constexpr std::string_view kRanks = "ranks=", kAt = " at_ms=", kHow = " how=";
  if (text.rfind(kRanks, 0) != 0) return std::nullopt;
  const size_t at = text.find(kAt);
  const size_t how = text.find(kHow);
  if (at == std::string::npos || how == std::string::npos || how < at) return std::nullopt;
  LossNotice notice;
  const std::string ranks = text.substr(kRanks.size(), at - kRanks.size());
  size_t start = 0;
  while (start < ranks.size()) {
    size_t end = ranks.find(',', start);
    if (end == std::string::npos) end = ranks.size();
    const std::string number = ranks.substr(start, end - start);
    if (number.empty() || number.size() > 9 ||
        number.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    notice.global_ranks.push_back(std::stoi(number));
    start = end + 1;
  }
  if (notice.global_ranks.empty()) return std::nullopt;
  const std::string when = text.substr(at + kAt.size(), how - at - kAt.size());
  if (when.empty() || when.size() > 18 ||
      when.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  notice.unix_ms = std::stoll(when);
  notice.how = text.substr(how + kHow.size());
  return notice;
}

}  // namespace infini::loss_notice
