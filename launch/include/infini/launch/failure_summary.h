// The report printed when a run fails: root cause first (torchrun's order).
#pragma once

#include <string>

#include "infini/launch/supervisor.h"

namespace infini::launch {

struct SummaryContext {
  std::string run_id;
  int node_rank = 0;
  std::string host_name;
  int attempt = 0;
  int max_restarts = 0;
  std::string log_dir_of_attempt;  // empty: no logs
};

std::string FormatFailureSummary(const AttemptResult& result, const SummaryContext& context);

// --on_failure=shrink, a run that went on: who was lost and when; empty when
// no rank was (the failure summary names them too when the run failed).
std::string FormatLossSummary(const AttemptResult& result, const SummaryContext& context);

}  // namespace infini::launch
