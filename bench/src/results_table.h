// Rank 0's console output: one table per collective in nccl-tests' columns
// (size, count, type, redop, root, time, algbw, busbw, #wrong), then the
// tail latencies (i_min, i_p50, i_p99, i_max: per-iteration times, us), in
// plain numbers (Google Benchmark's console would print 0.79 mGB/s as
// "791.39u"). The rows are kept for the -J JSON.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "collective_case.h"
#include "iteration_stats.h"

namespace infini::bench {

// What a row says beyond the measured counters.
struct TableCase {
  CaseSpec spec;
  int64_t count = 0;  // elements of S (collective_plan.h)
};

// The columns beyond nccl-tests' and the tails that a run prints.
struct ExtraColumns {
  bool verdict = false;  // %peak, verdict
  bool expect = false;   // vs_saved
  bool groups = false;   // group
};

// One formatted row; exposed for tests.
struct TableRow {
  int64_t bytes = 0;
  int64_t count = 0;
  std::string type;
  std::string redop;  // "none" for collectives that do not reduce
  int root = -1;      // -1 for collectives without a root
  double time_us = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  int64_t wrong = -1;  // -1: not checked ("N/A")
  bool in_place = false;
  bool cpu_time = false;         // time_us is the host clock's (-C)
  int64_t launches = 0;          // timed launches of the case
  std::string name;              // the Google Benchmark name
  IterationStats per_iteration;  // samples = 0: not measured ("N/A")
  std::vector<double> times_us;  // each iteration's time, max over ranks
  double peak_percent = -1;      // busbw / the link's peak, percent; < 0: no verdict
  std::string verdict;           // "healthy", "LOW", "latency", "n/a"; empty: no verdict
  std::string versus_saved;      // --expect: "+3%", "-12%", "+25%!" (regressed), "new"
  double saved_time_us = 0;
  bool regressed = false;
  int group = -1;  // --split: the group's colour; -1: no split
};

// Per-iteration times of a case by Google Benchmark name, left by global
// rank 0's first thread for the reporter.
using IterationTimes = std::map<std::string, std::vector<double>>;

// --split: one group's figures of a case, for a row of its own.
struct GroupResult {
  int color = 0;
  double time_us = 0;
  IterationStats tails;  // min, p50, p99, max and samples only
  int64_t wrong = -1;
};
using GroupResults = std::map<std::string, std::vector<GroupResult>>;

// What the reporter reads besides Google Benchmark's runs, and where it
// keeps the rows it prints; any may be null.
struct ReportSinks {
  const IterationTimes* times = nullptr;
  const GroupResults* groups = nullptr;
  std::vector<TableRow>* rows = nullptr;
  // Judges each row before it is printed (the verdict, --expect); may be
  // empty.
  std::function<void(Collective, int ranks, TableRow*)> judge;
  ExtraColumns extra;
};
// Two '#' lines: names, then units.
std::string FormatTableHeader(ExtraColumns extra = {});
std::string FormatTableRow(const TableRow& row);

class NcclTestsTableReporter : public benchmark::BenchmarkReporter {
 public:
  // `cases` by Google Benchmark name; `title` is the first line printed.
  NcclTestsTableReporter(std::map<std::string, TableCase> cases, std::string title, bool checked,
                         ReportSinks sinks);

  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;

 private:
  void PrintRun(const Run& run);
  void Keep(TableRow row);

  std::map<std::string, TableCase> cases_;
  std::string title_;
  bool checked_;
  ReportSinks sinks_;
  std::string current_collective_;
};

}  // namespace infini::bench
