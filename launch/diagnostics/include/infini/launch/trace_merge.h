// The end of a traced run on node 0's launcher (docs/tracing.md): every
// rank's file under --trace_dir merged into DIR/trace.json (Trace Event
// Format: a process per node, a thread lane per rank, "X" events, clocks
// aligned to the store's host), and --comm_summary's table.
#pragma once

#include <string>
#include <vector>

#include "infini/launch/trace_files.h"

namespace infini::launch {

struct MergedTrace {
  std::string path;                // DIR/trace.json; empty when nothing was merged
  std::vector<std::string> notes;  // one line each: an incomplete rank, a write failure
};

// Writes DIR/trace.json from `ranks`. Never throws: a failure is a note.
MergedTrace MergeTraces(const std::string& trace_dir, const std::vector<RankTraceFile>& ranks);

// --comm_summary's table: per op kind the calls, bytes, time and busbw of
// every rank's metrics, then the arrival skew of the collectives matched by
// group and number across ranks ("rank R was last in N % of collectives,
// median lateness X ms"). Lines end with '\n'.
std::string CommSummary(const std::vector<RankTraceFile>& ranks,
                        const std::vector<MetricsEntry>& metrics, int ranks_with_metrics);

// Both, for `trace_dir` (the launcher's end of a run): what the launcher
// says on its console.
struct TraceEnd {
  std::vector<std::string> notes;  // one line each: merged where, or why not
  std::string summary;             // --comm_summary's table; empty without it
};
TraceEnd FinishTraceOfRun(const std::string& trace_dir, bool with_summary);

}  // namespace infini::launch
