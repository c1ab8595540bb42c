#include "infini/launch/failure_summary.h"

#include <sstream>

namespace infini::launch {
namespace {

std::string RankName(const RankExit& rank) {
  return "rank " + std::to_string(rank.global_rank) + " (local rank " +
         std::to_string(rank.local_rank) + ", pid " + std::to_string(rank.pid) + ")";
}

}  // namespace

std::string FormatFailureSummary(const AttemptResult& result, const SummaryContext& context) {
  std::ostringstream text;
  const std::string lead = "infini_run: ";
  text << lead << "==== failure summary: run " << context.run_id << ", node " << context.node_rank
       << " (" << context.host_name << "), attempt " << context.attempt
       << " (--max_restarts=" << context.max_restarts << ") ====\n";
  if (result.outcome == AttemptOutcome::kRankFailed) {
    const RankExit& root = result.first_failure;
    text << lead << "first failure: " << RankName(root) << ": " << root.Describe() << "\n";
    if (root.tail.empty()) {
      text << lead << "  (no output from rank " << root.global_rank << ")\n";
    } else {
      text << lead << "  last " << root.tail.size() << " line(s) of its output:\n";
      for (const std::string& line : root.tail) text << lead << "    " << line << "\n";
    }
  }
  for (const RankExit& rank : result.ranks) {
    if (result.outcome == AttemptOutcome::kRankFailed && rank.pid == result.first_failure.pid &&
        rank.local_rank == result.first_failure.local_rank) {
      continue;
    }
    text << lead << "  " << RankName(rank) << ": " << rank.Describe()
         << (rank.stopped_by_launcher ? " (stopped by infini_run)" : "") << "\n";
  }
  if (!context.log_dir_of_attempt.empty()) {
    text << lead << "  logs: " << context.log_dir_of_attempt << "/rank_<N>/{stdout,stderr}.log\n";
  }
  return text.str();
}

}  // namespace infini::launch
