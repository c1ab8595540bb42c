// Running ccl_conformance as a porting engineer does (under infini_run) and
// reading the table global rank 0 prints: shared by the suite's run tests
// and its mutant tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace infini::conformance_test {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell, bounded so a hang fails the test.
inline RunResult RunCommand(const std::string& command) {
  RunResult result;
  FILE* pipe = popen(("timeout 120 " + command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t got = 0;
  while ((got = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), got);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

inline RunResult Conformance(const std::string& backend, const std::string& launcher_flags,
                             const std::string& suite_flags, const std::string& environment = "") {
  return RunCommand("env " + environment + " " + INFINI_RUN_PATH + " --ccl_backend=" + backend +
                    " " + launcher_flags + " -- " + CCL_CONFORMANCE_PATH + " --quick " +
                    suite_flags);
}

struct Row {
  std::string name, verdict, detail;
};

// The table rows global rank 0 printed ("[rank0]:name  verdict  detail").
inline std::vector<Row> Rows(const std::string& output) {
  std::vector<Row> rows;
  std::istringstream lines(output);
  bool in_table = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("[rank0]:", 0) != 0) continue;
    line = line.substr(8);
    if (line.rfind("ITEM ", 0) == 0) {
      in_table = true;
      continue;
    }
    if (!in_table || line.rfind("summary:", 0) == 0) {
      in_table = false;
      continue;
    }
    std::istringstream fields(line);
    Row row;
    fields >> row.name >> row.verdict;
    std::getline(fields, row.detail);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace infini::conformance_test
