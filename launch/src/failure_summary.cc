#include "infini/launch/failure_summary.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <sstream>

#include "infini/launch/signal_watcher.h"

namespace infini::launch {
namespace {

std::string RankName(const RankExit& rank) {
  return "rank " + std::to_string(rank.global_rank) + " (local rank " +
         std::to_string(rank.local_rank) + ", " + rank.PidText() + ")";
}

// What a rank's watchdog found through the flight recorder (parallel/):
// "infini_ccl flight recorder: behind: process rank N (...) on group ...".
struct StuckFinding {
  int process_rank = -1;
  std::string finding;  // the text after "behind: "
  int reported_by = -1;
};

constexpr const char* kBehindMarker = "infini_ccl flight recorder: behind: process rank ";
constexpr const char* kStuckRankNote = "; flight recorder: stuck rank ";

std::optional<StuckFinding> FindStuckRank(const AttemptResult& result) {
  for (const RankExit& rank : result.ranks) {
    for (const std::string& line : rank.tail) {
      const int process_rank = StuckProcessRankInLine(line);
      if (process_rank < 0) continue;
      StuckFinding finding;
      finding.process_rank = process_rank;
      finding.finding = "process rank " +
                        line.substr(line.find(kBehindMarker) + std::string(kBehindMarker).size());
      finding.reported_by = rank.global_rank;
      return finding;
    }
  }
  return std::nullopt;
}

// "lost rank 1 (local rank 1, pid 42): killed by SIGKILL (...) at 13:02:11.250 UTC"
void WriteLosses(const AttemptResult& result, const std::string& lead, std::ostringstream& text) {
  for (const RankLoss& loss : result.lost) {
    const std::time_t seconds = static_cast<std::time_t>(loss.unix_ms / 1000);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char when[32];
    std::snprintf(when, sizeof(when), "%02d:%02d:%02d.%03d UTC", utc.tm_hour, utc.tm_min,
                  utc.tm_sec, static_cast<int>(loss.unix_ms % 1000));
    text << lead << "lost " << RankName(loss.exit) << ": " << loss.exit.Describe() << " at " << when
         << " (the others went on, --on_failure=shrink)\n";
  }
}

}  // namespace

int StuckProcessRankInLine(const std::string& line) {
  const size_t at = line.find(kBehindMarker);
  if (at == std::string::npos) return -1;
  const std::string rest = line.substr(at + std::string(kBehindMarker).size());
  size_t digits = 0;
  while (digits < rest.size() && digits < 9 && rest[digits] >= '0' && rest[digits] <= '9') {
    ++digits;
  }
  return digits == 0 ? -1 : std::stoi(rest.substr(0, digits));
}

std::string StuckRankNote(int process_rank) {
  return kStuckRankNote + std::to_string(process_rank);
}

int StuckRankInMessage(const std::string& message) {
  const size_t at = message.find(kStuckRankNote);
  if (at == std::string::npos) return -1;
  const char* digits = message.c_str() + at + std::string(kStuckRankNote).size();
  if (*digits < '0' || *digits > '9') return -1;
  return static_cast<int>(std::strtol(digits, nullptr, 10));
}

std::string FormatRankStacks(const RankStacks& stacks, const std::string& lead,
                             const std::string& when, bool whole) {
  std::ostringstream text;
  const std::string name = "rank " + std::to_string(stacks.global_rank) + " (local rank " +
                           std::to_string(stacks.local_rank) + ", pid " +
                           std::to_string(stacks.pid) + ")";
  if (!stacks.capture.captured) {
    text << lead << "stacks of " << name << " not read: " << stacks.capture.failure << "\n";
    return text.str();
  }
  char took[32];
  std::snprintf(took, sizeof(took), "%.2f", static_cast<double>(stacks.capture.took.count()) / 1e3);
  text << lead << "stacks of " << name << ", read in " << took << " s " << when;
  if (!stacks.log_file.empty()) text << " (whole stacks: " << stacks.log_file << ")";
  if (!stacks.log_error.empty()) text << " (" << stacks.log_error << ")";
  text << ":\n";
  std::istringstream lines(whole ? stacks.capture.whole : stacks.capture.trimmed);
  for (std::string line; std::getline(lines, line);) {
    if (whole || !line.empty()) text << lead << "  " << line << "\n";
  }
  return text.str();
}

std::string FormatLossSummary(const AttemptResult& result, const SummaryContext& context) {
  if (result.lost.empty() && context.node_losses.empty()) return "";
  std::ostringstream text;
  const std::string lead = "infini_run: ";
  const size_t ranks = result.lost.size(), nodes = context.node_losses.size();
  const std::string ranks_lost = std::to_string(ranks) + " rank" + (ranks == 1 ? "" : "s");
  const std::string nodes_lost = std::to_string(nodes) + " node" + (nodes == 1 ? "" : "s");
  text << lead << "==== loss summary: run " << context.run_id << ", node " << context.node_rank
       << " (" << context.host_name << "), attempt " << context.attempt << ": "
       << (nodes == 0   ? ranks_lost
           : ranks == 0 ? nodes_lost
                        : ranks_lost + " and " + nodes_lost)
       << " lost, the run finished without them ====\n";
  WriteLosses(result, lead, text);
  for (const std::string& line : context.node_losses) text << lead << line << "\n";
  return text.str();
}

std::string FormatFailureSummary(const AttemptResult& result, const SummaryContext& context) {
  std::ostringstream text;
  const std::string lead = "infini_run: ";
  text << lead << "==== failure summary: run " << context.run_id << ", node " << context.node_rank
       << " (" << context.host_name << "), attempt " << context.attempt
       << " (--max_restarts=" << context.max_restarts << ") ====\n";
  if (const auto stuck = FindStuckRank(result)) {
    // A hang: the first watchdog to fire is a victim; name the rank behind.
    const RankExit* here = nullptr;
    for (const RankExit& rank : result.ranks) {
      if (rank.global_rank == stuck->process_rank) here = &rank;
    }
    text << lead << "stuck rank: "
         << (here != nullptr ? RankName(*here) + ": " + here->Describe() +
                                   (here->stopped_by_launcher ? " (stopped by infini_run)" : "")
                             : "rank " + std::to_string(stuck->process_rank) + " (another node)")
         << "; flight recorder of rank " << stuck->reported_by << ": " << stuck->finding << "\n";
  }
  for (const RankStacks& stacks : result.stuck_stacks) {
    text << FormatRankStacks(stacks, lead, "before infini_run stopped it", false);
  }
  WriteLosses(result, lead, text);
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

int RankExit::ExitStatus() const {
  if (stalled_by_signal) return 128 + stalled_by_signal;
  if (spawn_failed && exited) return exit_code == 0 ? 1 : exit_code;
  if (spawn_failed) return 127;
  return exited ? exit_code : 128 + signal_number;
}

std::string RankExit::PidText() const {
  std::string text = "pid " + std::to_string(pid);
  if (namespace_pid > 0 && namespace_pid != pid) {
    text += ", getpid() " + std::to_string(namespace_pid) + " in its PID namespace";
  }
  return text;
}

std::string RankExit::Describe() const {
  if (spawn_failed) return detail;
  if (stalled_by_signal) {
    char name[32];
    return std::string("stopped by ") + SignalName(stalled_by_signal, name) +
           " and not continued in time (exit status " + std::to_string(128 + stalled_by_signal) +
           ")";
  }
  if (exited) return "exit code " + std::to_string(exit_code);
  char name[32];
  return std::string("killed by ") + SignalName(signal_number, name) + " (exit status " +
         std::to_string(128 + signal_number) + ")";
}

}  // namespace infini::launch
