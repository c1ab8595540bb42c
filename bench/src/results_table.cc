#include "results_table.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <utility>

namespace infini::bench {
namespace {

bool HasRoot(Collective collective) {
  return collective == Collective::kBroadcast || collective == Collective::kReduce;
}

double CounterOr(const benchmark::UserCounters& counters, const char* name, double fallback) {
  const auto found = counters.find(name);
  return found == counters.end() ? fallback : found->second.value;
}

}  // namespace

std::string FormatTableHeader() {
  char names[256];
  char units[256];
  std::snprintf(names, sizeof(names), "#%13s %13s %9s %7s %5s %11s %9s %9s %7s", "size", "count",
                "type", "redop", "root", "time", "algbw", "busbw", "#wrong");
  std::snprintf(units, sizeof(units), "#%13s %13s %9s %7s %5s %11s %9s %9s", "(B)", "(elements)",
                "", "", "", "(us)", "(GB/s)", "(GB/s)");
  return std::string(names) + "\n" + units + "\n";
}

std::string FormatTableRow(const TableRow& row) {
  char wrong[32];
  if (row.wrong < 0) {
    std::snprintf(wrong, sizeof(wrong), "N/A");
  } else {
    std::snprintf(wrong, sizeof(wrong), "%" PRId64, row.wrong);
  }
  char text[512];
  std::snprintf(text, sizeof(text),
                " %13" PRId64 " %13" PRId64 " %9s %7s %5d %11.2f %9.2f %9.2f %7s\n", row.bytes,
                row.count, row.type.c_str(), row.redop.c_str(), row.root, row.time_us,
                row.algbw_GBps, row.busbw_GBps, wrong);
  return text;
}

NcclTestsTableReporter::NcclTestsTableReporter(std::map<std::string, TableCase> cases,
                                               std::string title, bool checked)
    : cases_(std::move(cases)), title_(std::move(title)), checked_(checked) {}

bool NcclTestsTableReporter::ReportContext(const Context&) {
  GetOutputStream() << title_ << std::endl;
  return true;
}

void NcclTestsTableReporter::ReportRuns(const std::vector<Run>& runs) {
  for (const Run& run : runs) PrintRun(run);
  GetOutputStream().flush();
}

void NcclTestsTableReporter::PrintRun(const Run& run) {
  std::ostream& out = GetOutputStream();
  const auto found = cases_.find(run.run_name.function_name);
  if (found == cases_.end()) return;  // not one of ours
  const CaseSpec& spec = found->second.spec;
  if (run.error_occurred) {
    out << "# " << run.benchmark_name() << ": " << run.error_message << std::endl;
    return;
  }
  const std::string collective(BenchCollectiveName(spec.collective));
  if (collective != current_collective_) {
    current_collective_ = collective;
    out << "#\n# " << collective << ", " << (spec.in_place ? "in-place" : "out-of-place") << "\n"
        << FormatTableHeader();
  }
  TableRow row;
  row.bytes = std::llround(CounterOr(run.counters, "bytes", 0));
  row.count = found->second.count;
  row.type = ccl::DataTypeName(spec.dtype);
  row.redop = ccl::IsReduction(spec.collective) ? std::string(ccl::ReduceOpName(spec.op)) : "none";
  row.root = HasRoot(spec.collective) ? spec.root : -1;
  row.time_us = CounterOr(run.counters, "time_us", 0);
  row.algbw_GBps = CounterOr(run.counters, "algbw_GBps", 0);
  row.busbw_GBps = CounterOr(run.counters, "busbw_GBps", 0);
  row.wrong = checked_ ? std::llround(CounterOr(run.counters, "wrong", 0)) : -1;
  std::string line = FormatTableRow(row);
  if (run.run_type == Run::RT_Aggregate) {  // --benchmark_repetitions
    line.insert(line.size() - 1, "  " + run.aggregate_name);
  }
  out << line;
}

}  // namespace infini::bench
