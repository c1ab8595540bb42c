// Real processes for the multi-host and scheduler tests: started with a
// marker in their environment (inherited by everything they start), output
// captured in a file, waited for with a deadline, killed (whole process
// group) and reaped when a test ends early.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace infini::hosts_testing {

// HOSTS_TEST_MARK=<this> is in the environment of every process a test
// starts, so "no process of the run is left" can scan /proc for it.
std::string TestMark();

// Processes (not zombies) whose environment holds the mark.
std::vector<pid_t> ProcessesOfThisTest();
// Whether none is left, polling up to `bound`.
bool NoProcessLeft(std::chrono::milliseconds bound = std::chrono::seconds(10));

struct ExitReport {
  bool exited = false;  // false: still running at the deadline (then killed)
  int exit_code = -1;   // 128 + signal when killed by a signal
  std::chrono::milliseconds elapsed{0};
};

class ChildProcess {
 public:
  // argv[0] is looked up in PATH. `environment`: NAME=value added to ours.
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
               std::string output_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Waits until the process exits or `bound` passes; on a hang kills its
  // process group and reports exited = false.
  ExitReport Wait(std::chrono::milliseconds bound);
  // stdout and stderr so far.
  std::string Output() const;
  // Whether `text` appears in the output within `bound` (false if the
  // process exits first without it).
  bool WaitForOutput(const std::string& text, std::chrono::milliseconds bound);

 private:
  void KillAndReap();

  std::string output_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  ExitReport report_;
  std::chrono::steady_clock::time_point started_;
};

// Runs a short command (ip, a helper script) to completion within `bound`:
// its exit code, -1 on a hang; its output in *output when given.
int RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds bound,
               std::string* output = nullptr);

// A scratch folder removed (recursively) at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600);

}  // namespace infini::hosts_testing
