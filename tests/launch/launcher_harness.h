// Runs infini_run as a real process for the tests and checks what it leaves
// behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace infini::launch::testing {

// A scratch folder removed at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct LauncherResult {
  int exit_code = -1;  // -1: did not exit by itself within the bound (a hang)
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};

// Every infini_run a test starts carries INFINI_LAUNCH_TEST_MARK=<this>, and
// so does every process it starts (ranks, their daemons, grandchildren):
// what "no process of the run is left" scans /proc for.
std::string TestMark();
// Processes (not zombies) whose environment holds the test mark.
std::vector<pid_t> ProcessesOfThisTest();
// Whether none is left, waiting up to `bound`.
bool NoProcessLeft(std::chrono::milliseconds bound = std::chrono::seconds(10));
// The pid (in this namespace) of the rank with RANK=`rank` whose parent is
// `launcher` (or the launcher's watcher, a child of it, when the run has no
// PID namespace); -1 if none within `bound`.
pid_t FindRankPid(pid_t launcher, int rank,
                  std::chrono::milliseconds bound = std::chrono::seconds(20));

struct LaunchSetup {
  std::vector<std::string> extra_environment;  // NAME=value
  bool stdout_unread_pipe = false;             // stdout is a pipe that nobody reads
  // INFINI_RUN_TOKEN=TestToken() in the launcher's environment, as a
  // scheduler would hand it to every node.
  bool with_token = true;
  // The launcher runs as user nobody (through setpriv, which execs it: the
  // pid stays the launcher's), as an unprivileged user would start it: no
  // PID namespace. Nothing changes when the test is not root already.
  bool as_nobody = false;
};

// Whether LaunchSetup::as_nobody can be honoured: the test is not root (it
// is unprivileged already), or setpriv and the user nobody exist.
bool CanRunAsNobody();
// chmod 0777, so that a launcher run as nobody and its ranks write there.
void OpenToEveryone(const TempDir& dir);
// Whether `pid` lives in this process's PID namespace.
bool InOurPidNamespace(pid_t pid);
// The real uid of `pid`, -1 if it is gone.
long UidOf(pid_t pid);
// Whether `pid` is dead (gone, or a zombie not reaped yet).
bool ProcessGone(pid_t pid);

std::string TestToken();

// One infini_run process, stdout/stderr captured in files.
class LauncherProcess {
 public:
  explicit LauncherProcess(const std::vector<std::string>& arguments,
                           const LaunchSetup& setup = {});
  ~LauncherProcess();
  pid_t pid() const { return pid_; }
  // Waits up to `bound`; on a hang kills it (and reports exit_code -1).
  LauncherResult Wait(std::chrono::milliseconds bound = std::chrono::seconds(30));
  // What it wrote so far (stdout and stderr), while it runs.
  std::string OutputSoFar() const;
  // Waits up to `bound` until its output so far contains `text`.
  bool WaitForOutput(const std::string& text,
                     std::chrono::milliseconds bound = std::chrono::seconds(30)) const;

 private:
  TempDir capture_;
  int unread_pipe_ = -1;
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::chrono::steady_clock::time_point started_;
};

LauncherResult RunLauncher(const std::vector<std::string>& arguments,
                           std::chrono::milliseconds bound = std::chrono::seconds(30));

std::string LauncherPath();
std::string ChildPath();

// The pids the test children recorded in `dir` (<rank>.<attempt>.pid files).
std::vector<pid_t> RecordedPids(const std::string& dir);
// Waits until `count` pid files exist (true) or `bound` passes (false).
bool WaitForPidFiles(const std::string& dir, size_t count,
                     std::chrono::milliseconds bound = std::chrono::seconds(20));
// Whether every process of this test is gone (zombies count as gone; see
// TestMark), waiting up to `bound` for the last ones to die.
bool AllRecordedProcessesGone(const std::string& dir,
                              std::chrono::milliseconds bound = std::chrono::seconds(10));

// NAME=value lines of a <rank>.<attempt>.env file.
std::map<std::string, std::string> RecordedEnvironment(const std::string& dir, int rank,
                                                       int attempt = 0);
std::vector<std::string> RecordedArguments(const std::string& dir, int rank, int attempt = 0);

std::string ReadFile(const std::string& path);
std::vector<std::string> Lines(const std::string& text);
int FreePort();

}  // namespace infini::launch::testing
