// The report printed when a run fails: root cause first (torchrun's order).
#pragma once

#include <string>
#include <vector>

#include "infini/launch/supervisor.h"

namespace infini::launch {

struct SummaryContext {
  std::string run_id;
  int node_rank = 0;
  std::string host_name;
  int attempt = 0;
  int max_restarts = 0;
  std::string log_dir_of_attempt;  // empty: no logs
  // --on_failure=shrink: one line per node lost in the run (its ranks and
  // how), for the loss summary.
  std::vector<std::string> node_losses;
};

// parallel/'s flight recorder names the rank a hang waits on with a line
// "infini_ccl flight recorder: behind: process rank N ..." (docs/parallel.md):
// N, or -1 when `line` is not one.
int StuckProcessRankInLine(const std::string& line);

// How a node's failure, as other nodes read it (the failure message in the
// store), names the stuck rank: "; flight recorder: stuck rank N".
std::string StuckRankNote(int process_rank);
// N from a message that holds StuckRankNote(N); -1 when none does.
int StuckRankInMessage(const std::string& message);

// "stacks of rank 1 (local rank 1, pid 42), read in 0.41 s WHEN (whole
// stacks: FILE):" and the trimmed stacks, or the whole ones when `whole`;
// or one line saying why they were not read. Each line starts with `lead`.
std::string FormatRankStacks(const RankStacks& stacks, const std::string& lead,
                             const std::string& when, bool whole);

std::string FormatFailureSummary(const AttemptResult& result, const SummaryContext& context);

// --on_failure=shrink, a run that went on: who was lost and when, ranks of
// this node and whole nodes; empty when none was (the failure summary names
// this node's ranks too when the run failed).
std::string FormatLossSummary(const AttemptResult& result, const SummaryContext& context);

}  // namespace infini::launch
