// What global rank 0 of ccl_conformance collects and prints, and the file
// that carries it across a restart of the run (a crash under
// infini_run --max_restarts).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "suite.h"

namespace infini::conformance {

struct Row {
  std::string name;
  Outcome outcome;
};

// What global rank 0 collects, shared with the watchdog, which prints it
// when a rank is stuck for good.
struct Report {
  std::mutex mutex;
  std::string header;
  std::vector<Row> rows;
  std::string running;  // the item in progress
};

std::map<Verdict, int> Tally(const std::vector<Row>& rows);
std::string SummaryLine(const std::vector<Row>& rows);
// The header, one line an item, the summary, on stdout.
void PrintTable(const Report& report);

// Going on after a crash: global rank 0 writes its rows and the index of
// the next item to ResumePath(run id) when the launcher will restart the
// run; the next attempt reads the file (ReadResume deletes it) and goes on
// from that item. One row a line: "<verdict>\t<name>\t<detail>".
std::string ResumePath(const std::string& run_id);
void WriteResume(const char* path, const Report& report, size_t next_index);
// The rows of the attempts before (appended to `report`) and the index to
// go on from; 0 when there is no file.
size_t ReadResume(const std::string& path, Report* report);

}  // namespace infini::conformance
