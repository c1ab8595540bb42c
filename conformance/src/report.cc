#include "report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

namespace infini::conformance {

std::map<Verdict, int> Tally(const std::vector<Row>& rows) {
  std::map<Verdict, int> tally;
  for (const Row& row : rows) ++tally[row.outcome.verdict];
  return tally;
}

std::string SummaryLine(const std::vector<Row>& rows) {
  std::map<Verdict, int> tally = Tally(rows);
  return std::to_string(tally[Verdict::kPass]) + " pass, " +
         std::to_string(tally[Verdict::kUnsupported]) + " unsupported, " +
         std::to_string(tally[Verdict::kMissing]) + " missing, " +
         std::to_string(tally[Verdict::kFail]) + " FAIL";
}

void PrintTable(const Report& report) {
  size_t width = 4;
  for (const Row& row : report.rows) width = std::max(width, row.name.size());
  std::ostringstream out;
  out << report.header << "\n";
  out << std::string("ITEM") + std::string(width - 4 + 2, ' ') << "VERDICT      DETAIL\n";
  for (const Row& row : report.rows) {
    const std::string verdict(VerdictName(row.outcome.verdict));
    out << row.name << std::string(width - row.name.size() + 2, ' ') << verdict
        << std::string(13 - verdict.size(), ' ') << row.outcome.detail << "\n";
  }
  out << "summary: " << SummaryLine(report.rows) << "\n";
  std::cout << out.str() << std::flush;
}

std::string ResumePath(const std::string& run_id_in) {
  const char* tmp = std::getenv("TMPDIR");
  std::string run_id = run_id_in;
  for (char& c : run_id) {
    if (c == '/') c = '_';
  }
  return std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ccl_conformance." + run_id +
         ".resume";
}

void WriteResume(const char* path, const Report& report, size_t next_index) {
  FILE* file = std::fopen(path, "w");
  if (file == nullptr) return;
  std::fprintf(file, "%zu\n", next_index);
  for (const Row& row : report.rows) {
    std::string detail = row.outcome.detail;
    for (char& c : detail) {
      if (c == '\t' || c == '\n') c = ' ';
    }
    std::fprintf(file, "%d\t%s\t%s\n", static_cast<int>(row.outcome.verdict), row.name.c_str(),
                 detail.c_str());
  }
  std::fclose(file);
}

// The rows of the attempts before, and the index to go on from (0: none).
size_t ReadResume(const std::string& path, Report* report) {
  std::ifstream file(path);
  if (!file) return 0;
  size_t next_index = 0;
  std::string line;
  if (std::getline(file, line)) next_index = std::strtoull(line.c_str(), nullptr, 10);
  while (std::getline(file, line)) {
    const size_t first_tab = line.find('\t');
    const size_t second_tab = line.find('\t', first_tab + 1);
    if (first_tab == std::string::npos || second_tab == std::string::npos) continue;
    Outcome outcome;
    outcome.verdict = static_cast<Verdict>(std::atoi(line.substr(0, first_tab).c_str()));
    outcome.detail = line.substr(second_tab + 1);
    report->rows.push_back({line.substr(first_tab + 1, second_tab - first_tab - 1), outcome});
  }
  std::remove(path.c_str());
  return next_index;
}

}  // namespace infini::conformance
