// Runs programs for the gpt2 tests and reads their progress lines.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace infini::examples::gpt2::testing {

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell, bounded so that a hang fails the test
// instead of stalling CI. `env` lets the command start with VAR=value
// assignments, which `timeout` alone would take for the program's name.
inline Result RunCommand(const std::string& command) {
  const std::string bounded = "timeout -k 5 120 env " + command + " 2>&1";
  Result result;
  FILE* pipe = popen(bounded.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, got);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The loss of every "step N/M | loss X | ..." line, in order. (Plain string
// search: GCC 12's <regex> trips -Wmaybe-uninitialized under ASan.)
inline std::vector<double> StepLosses(const std::string& output) {
  std::vector<double> losses;
  size_t line_start = 0;
  while (line_start < output.size()) {
    size_t line_end = output.find('\n', line_start);
    if (line_end == std::string::npos) line_end = output.size();
    const std::string line = output.substr(line_start, line_end - line_start);
    const size_t step = line.find("step ");
    const size_t loss = line.find("| loss ");
    if (step != std::string::npos && loss != std::string::npos && step < loss &&
        line.find('/', step) < loss) {
      losses.push_back(std::stod(line.substr(loss + 7)));
    }
    line_start = line_end + 1;
  }
  return losses;
}

// Printed with 4 decimals; summation order differs between layouts.
inline void ExpectSameLosses(const std::vector<double>& expected, const std::vector<double>& actual,
                             const std::string& context, double tolerance = 2e-3) {
  ASSERT_EQ(expected.size(), actual.size()) << context;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(expected[i], actual[i], tolerance) << "step " << i + 1 << "\n" << context;
  }
}

// The last "throughput: key=value ..." line of rank 0.
struct ThroughputLine {
  std::map<std::string, std::string> fields;
  double tokens_per_s = -1.0, per_gpu = -1.0, step_ms = -1.0;
  int ranks = 0;
};
inline ThroughputLine ParseThroughput(const std::string& output) {
  ThroughputLine line;
  const size_t at = output.rfind("throughput: ");
  if (at == std::string::npos) return line;
  std::istringstream words(output.substr(at + 12, output.find('\n', at) - at - 12));
  std::string word;
  while (words >> word) {
    const size_t equals = word.find('=');
    if (equals != std::string::npos) line.fields[word.substr(0, equals)] = word.substr(equals + 1);
  }
  const auto number = [&](const char* key) {
    return line.fields.count(key) ? std::stod(line.fields.at(key)) : -1.0;
  };
  line.tokens_per_s = number("tokens_per_s");
  line.per_gpu = number("per_gpu");
  line.step_ms = number("step_ms");
  line.ranks = static_cast<int>(number("ranks"));
  return line;
}

class TemporaryDirectory {
 public:
  TemporaryDirectory()
      : path_(
            std::filesystem::temp_directory_path() /
            ("gpt2_program_test_" + std::to_string(getpid()) + "_" + std::to_string(counter_++))) {}
  ~TemporaryDirectory() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace infini::examples::gpt2::testing
