#include "host_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace infini::hosts_testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(20);

std::vector<std::string> EnvironmentWith(const std::vector<std::string>& extra) {
  std::vector<std::string> all;
  for (char** entry = environ; *entry != nullptr; ++entry) all.emplace_back(*entry);
  // A process may be given a mark of its own (long-lived daemons a test
  // starts once and whose leftovers are checked separately).
  bool marked = false;
  for (const std::string& entry : extra) marked |= entry.rfind("HOSTS_TEST_MARK=", 0) == 0;
  if (!marked) all.push_back("HOSTS_TEST_MARK=" + TestMark());
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& text : strings) pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Starts argv in a process group of its own, stdout+stderr to `output_path`.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
            const std::string& output_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  std::vector<std::string> arguments = argv;
  std::vector<std::string> variables = EnvironmentWith(environment);
  pid_t pid = -1;
  const int error = posix_spawnp(&pid, arguments[0].c_str(), &actions, &attributes,
                                 Pointers(arguments).data(), Pointers(variables).data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) throw std::runtime_error("cannot start " + argv[0]);
  return pid;
}

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

bool EnvironmentHolds(pid_t pid, const std::string& entry) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string variable;
  while (std::getline(file, variable, '\0')) {
    if (variable == entry) return true;
  }
  return false;
}

bool IsZombie(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(file, line);
  const size_t close_paren = line.rfind(')');
  return close_paren == std::string::npos || line.substr(close_paren + 2, 1) == "Z";
}

}  // namespace

std::string TestMark() {
  static const std::string mark = "hosts-" + std::to_string(getpid());
  return mark;
}

std::vector<pid_t> ProcessesOfThisTest() {
  std::vector<pid_t> found;
  const std::string entry = "HOSTS_TEST_MARK=" + TestMark();
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* item = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(item->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
    if (EnvironmentHolds(static_cast<pid_t>(pid), entry) && !IsZombie(static_cast<pid_t>(pid))) {
      found.push_back(static_cast<pid_t>(pid));
    }
  }
  closedir(proc);
  return found;
}

bool NoProcessLeft(std::chrono::milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  while (!ProcessesOfThisTest().empty()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
  return true;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::string>& environment, std::string output_path)
    : output_path_(std::move(output_path)), started_(Clock::now()) {
  pid_ = Spawn(argv, environment, output_path_);
}

ChildProcess::~ChildProcess() {
  if (!reaped_) KillAndReap();
}

void ChildProcess::KillAndReap() {
  kill(-pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  reaped_ = true;
}

ExitReport ChildProcess::Wait(std::chrono::milliseconds bound) {
  if (reaped_) return report_;
  const auto deadline = Clock::now() + bound;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      reaped_ = true;
      report_ = {true, ExitCodeOf(status),
                 std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_)};
      return report_;
    }
    if (Clock::now() > deadline) {
      KillAndReap();
      report_ = {false, -1,
                 std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_)};
      return report_;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::string ChildProcess::Output() const { return ReadFile(output_path_); }

bool ChildProcess::WaitForOutput(const std::string& text, std::chrono::milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  while (Clock::now() < deadline) {
    if (Output().find(text) != std::string::npos) return true;
    if (!reaped_ && waitpid(pid_, nullptr, WNOHANG) == pid_) reaped_ = true;
    if (reaped_) return Output().find(text) != std::string::npos;
    std::this_thread::sleep_for(kPollInterval);
  }
  return false;
}

int RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds bound,
               std::string* output) {
  TempDir scratch;
  const std::string path = scratch.path() + "/output";
  ExitReport report;
  {
    ChildProcess child(argv, {}, path);
    report = child.Wait(bound);
  }
  if (output != nullptr) *output = ReadFile(path);
  return report.exited ? report.exit_code : -1;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "iccl_hosts_XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  {
    std::ofstream file(path, std::ios::trunc);
    file << text;
  }
  chmod(path.c_str(), mode);
}

}  // namespace infini::hosts_testing
