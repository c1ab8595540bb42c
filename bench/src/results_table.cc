#include "results_table.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <utility>

#include "collective_plan.h"

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

std::string FormatTableHeader(ExtraColumns extra) {
  char names[400];
  char units[400];
  std::snprintf(names, sizeof(names),
                "#%13s %13s %9s %7s %5s %11s %9s %9s %7s %9s %9s %9s %9s%s%s%s", "size", "count",
                "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "i_min", "i_p50",
                "i_p99", "i_max", extra.verdict ? "   %peak  verdict" : "",
                extra.expect ? "  vs_saved" : "", extra.groups ? "  group" : "");
  std::snprintf(units, sizeof(units), "#%13s %13s %9s %7s %5s %11s %9s %9s %7s %9s %9s %9s %9s",
                "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)",
                "(us)", "(us)");
  return std::string(names) + "\n" + units + "\n";
}

std::string FormatTableRow(const TableRow& row) {
  char wrong[32];
  if (row.wrong < 0) {
    std::snprintf(wrong, sizeof(wrong), "N/A");
  } else {
    std::snprintf(wrong, sizeof(wrong), "%" PRId64, row.wrong);
  }
  char tails[128];
  const IterationStats& stats = row.per_iteration;
  if (stats.samples > 0) {
    std::snprintf(tails, sizeof(tails), " %9.2f %9.2f %9.2f %9.2f", stats.min_us, stats.p50_us,
                  stats.p99_us, stats.max_us);
  } else {
    std::snprintf(tails, sizeof(tails), " %9s %9s %9s %9s", "N/A", "N/A", "N/A", "N/A");
  }
  char verdict[64] = "";
  if (!row.verdict.empty()) {
    std::snprintf(verdict, sizeof(verdict), " %7.1f %8s", row.peak_percent, row.verdict.c_str());
  }
  char versus[32] = "";
  if (!row.versus_saved.empty()) {
    std::snprintf(versus, sizeof(versus), " %9s", row.versus_saved.c_str());
  }
  char group[32] = "";
  if (row.group >= 0) std::snprintf(group, sizeof(group), " %6d", row.group);
  char text[640];
  std::snprintf(text, sizeof(text),
                " %13" PRId64 " %13" PRId64 " %9s %7s %5d %11.2f %9.2f %9.2f %7s%s%s%s%s\n",
                row.bytes, row.count, row.type.c_str(), row.redop.c_str(), row.root, row.time_us,
                row.algbw_GBps, row.busbw_GBps, wrong, tails, verdict, versus, group);
  return text;
}

NcclTestsTableReporter::NcclTestsTableReporter(std::map<std::string, TableCase> cases,
                                               std::string title, bool checked, ReportSinks sinks)
    : cases_(std::move(cases)), title_(std::move(title)), checked_(checked), sinks_(sinks) {}

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
  const bool aggregate = run.run_type == Run::RT_Aggregate;
  const std::vector<GroupResult>* groups = nullptr;
  if (sinks_.groups != nullptr && !aggregate) {
    const auto found_groups = sinks_.groups->find(run.run_name.function_name);
    if (found_groups != sinks_.groups->end()) groups = &found_groups->second;
  }
  if (collective != current_collective_) {
    current_collective_ = collective;
    out << "#\n# " << collective << ", " << (spec.in_place ? "in-place" : "out-of-place") << "\n"
        << FormatTableHeader(
               ExtraColumns{sinks_.extra.verdict, sinks_.extra.expect, groups != nullptr});
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
  row.in_place = spec.in_place;
  row.cpu_time = CounterOr(run.counters, "cpu_time", 0) > 0;
  row.launches = std::llround(CounterOr(run.counters, "launches", 0));
  row.name = run.run_name.function_name;
  if (sinks_.times != nullptr && !aggregate) {
    const auto times = sinks_.times->find(row.name);
    if (times != sinks_.times->end()) {
      row.times_us = times->second;
      row.per_iteration = ComputeIterationStats(row.times_us);
    }
  }
  const int ranks = static_cast<int>(std::llround(CounterOr(run.counters, "ranks", 1)));
  const auto judge = [&](TableRow* judged) {
    if (sinks_.judge && !aggregate) sinks_.judge(spec.collective, ranks, judged);
  };
  if (groups != nullptr) {
    // One row per group, each with its own time; the bus factor is the
    // group size's (the "ranks" counter).
    const double factor = BusBandwidthFactor(spec.collective, ranks);
    for (const GroupResult& group : *groups) {
      TableRow group_row = row;
      group_row.group = group.color;
      group_row.time_us = group.time_us;
      group_row.algbw_GBps = group.time_us > 0 ? row.bytes / group.time_us / 1e3 : 0;
      group_row.busbw_GBps = group_row.algbw_GBps * factor;
      group_row.wrong = checked_ ? group.wrong : -1;
      group_row.per_iteration = group.tails;
      group_row.times_us.clear();
      judge(&group_row);
      out << FormatTableRow(group_row);
      Keep(std::move(group_row));
    }
    return;
  }
  judge(&row);
  std::string line = FormatTableRow(row);
  if (aggregate) {  // --benchmark_repetitions
    line.insert(line.size() - 1, "  " + run.aggregate_name);
  }
  out << line;
  if (!aggregate) Keep(std::move(row));
}

void NcclTestsTableReporter::Keep(TableRow row) {
  if (sinks_.rows != nullptr) sinks_.rows->push_back(std::move(row));
}

}  // namespace infini::bench
