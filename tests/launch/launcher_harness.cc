#include "launcher_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "unused_port.h"

extern char** environ;

namespace infini::launch::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kSetpriv[] = "/usr/bin/setpriv";

pid_t ParentOf(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos || close_paren + 4 >= stat.size()) return -1;
  return static_cast<pid_t>(std::atoi(stat.c_str() + close_paren + 4));
}

}  // namespace

bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  // A zombie is dead; its parent (init or the launcher) just did not reap it yet.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close_paren = text.rfind(')');
  return text.empty() || (close_paren != std::string::npos && close_paren + 2 < text.size() &&
                          text[close_paren + 2] == 'Z');
}

bool CanRunAsNobody() {
  return geteuid() != 0 || (access(kSetpriv, X_OK) == 0 && getpwnam("nobody") != nullptr &&
                            getgrnam("nogroup") != nullptr);
}

void OpenToEveryone(const TempDir& dir) { chmod(dir.path().c_str(), 0777); }

bool InOurPidNamespace(pid_t pid) {
  std::error_code error;
  auto theirs = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/ns/pid", error);
  return !error && theirs == std::filesystem::read_symlink("/proc/self/ns/pid");
}

long UidOf(pid_t pid) {
  for (const std::string& line : Lines(ReadFile("/proc/" + std::to_string(pid) + "/status"))) {
    if (line.rfind("Uid:", 0) == 0) return std::atol(line.c_str() + 4);
  }
  return -1;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "infini_launch_test_XXXXXX");
  char* made = mkdtemp(pattern.data());
  path_ = made ? made : "";
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TestMark() {
  static const std::string mark = "launcher_test_" + std::to_string(getpid());
  return mark;
}

std::string TestToken() { return "secret-of-" + TestMark(); }

std::vector<pid_t> ProcessesOfThisTest() {
  const std::string needle = "INFINI_LAUNCH_TEST_MARK=" + TestMark();
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string environment = ReadFile(entry.path() / "environ");
    for (size_t at = 0; at < environment.size();) {
      size_t end = environment.find('\0', at);
      if (end == std::string::npos) end = environment.size();
      if (environment.compare(at, end - at, needle) == 0) {
        const pid_t pid = static_cast<pid_t>(std::stoi(name));
        if (!ProcessGone(pid)) found.push_back(pid);
        break;
      }
      at = end + 1;
    }
  }
  return found;
}

bool NoProcessLeft(std::chrono::milliseconds bound) {
  auto deadline = Clock::now() + bound;
  while (!ProcessesOfThisTest().empty()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

pid_t FindRankPid(pid_t launcher, int rank, std::chrono::milliseconds bound) {
  auto deadline = Clock::now() + bound;
  const std::string wanted = "RANK=" + std::to_string(rank);
  while (Clock::now() < deadline) {
    for (pid_t pid : ProcessesOfThisTest()) {
      std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
      size_t close_paren = stat.rfind(')');
      if (close_paren == std::string::npos) continue;
      // Without a PID namespace the ranks' parent is the launcher's watcher.
      const pid_t parent = static_cast<pid_t>(std::atoi(stat.c_str() + close_paren + 4));
      if (parent != launcher && ParentOf(parent) != launcher) continue;
      std::string environment = ReadFile("/proc/" + std::to_string(pid) + "/environ");
      // std::string(1, 0): "\0" as a C string would be empty, matching LOCAL_RANK.
      if (environment.find(std::string(1, '\0') + wanted + '\0') != std::string::npos) return pid;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

LauncherProcess::LauncherProcess(const std::vector<std::string>& arguments,
                                 const LaunchSetup& setup) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  int unread[2] = {-1, -1};
  if (setup.stdout_unread_pipe && pipe2(unread, O_CLOEXEC) == 0) {
    unread_pipe_ = unread[0];
    posix_spawn_file_actions_adddup2(&actions, unread[1], STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, (capture_.path() + "/out").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, (capture_.path() + "/err").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> words;
  if (setup.as_nobody && geteuid() == 0) {
    words = {kSetpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"};
  }
  words.push_back(LauncherPath());
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::vector<std::string> environment;
  for (char** entry = environ; *entry; ++entry) environment.emplace_back(*entry);
  environment.push_back("INFINI_LAUNCH_TEST_MARK=" + TestMark());
  if (setup.with_token) environment.push_back("INFINI_RUN_TOKEN=" + TestToken());
  environment.insert(environment.end(), setup.extra_environment.begin(),
                     setup.extra_environment.end());
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  started_ = Clock::now();
  if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data()) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&actions);
  if (unread[1] >= 0) close(unread[1]);
}

LauncherProcess::~LauncherProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (unread_pipe_ >= 0) close(unread_pipe_);
}

std::string LauncherProcess::OutputSoFar() const {
  return ReadFile(capture_.path() + "/out") + ReadFile(capture_.path() + "/err");
}

bool LauncherProcess::WaitForOutput(const std::string& text,
                                    std::chrono::milliseconds bound) const {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (OutputSoFar().find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

LauncherResult LauncherProcess::Wait(std::chrono::milliseconds bound) {
  LauncherResult result;
  auto deadline = started_ + bound;
  int status = 0;
  while (pid_ > 0 && !reaped_) {
    pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      reaped_ = true;
      result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (Clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      reaped_ = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_);
  result.out = ReadFile(capture_.path() + "/out");
  result.err = ReadFile(capture_.path() + "/err");
  return result;
}

LauncherResult RunLauncher(const std::vector<std::string>& arguments,
                           std::chrono::milliseconds bound) {
  LauncherProcess launcher(arguments);
  return launcher.Wait(bound);
}

std::string LauncherPath() { return INFINI_RUN_PATH; }
std::string ChildPath() { return LAUNCH_TEST_CHILD_PATH; }

std::vector<pid_t> RecordedPids(const std::string& dir) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".pid") {
      pids.push_back(static_cast<pid_t>(std::atoi(ReadFile(entry.path()).c_str())));
    }
  }
  return pids;
}

bool WaitForPidFiles(const std::string& dir, size_t count, std::chrono::milliseconds bound) {
  auto deadline = Clock::now() + bound;
  while (RecordedPids(dir).size() < count) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

bool AllRecordedProcessesGone(const std::string& /*dir*/, std::chrono::milliseconds bound) {
  // Recorded pids are those of the ranks' own PID namespace; the mark finds
  // the processes from here, descendants included.
  return NoProcessLeft(bound);
}

std::map<std::string, std::string> RecordedEnvironment(const std::string& dir, int rank,
                                                       int attempt) {
  std::map<std::string, std::string> variables;
  for (const std::string& line :
       Lines(ReadFile(dir + "/" + std::to_string(rank) + "." + std::to_string(attempt) + ".env"))) {
    size_t equals = line.find('=');
    if (equals != std::string::npos) variables[line.substr(0, equals)] = line.substr(equals + 1);
  }
  return variables;
}

std::vector<std::string> RecordedArguments(const std::string& dir, int rank, int attempt) {
  return Lines(
      ReadFile(dir + "/" + std::to_string(rank) + "." + std::to_string(attempt) + ".argv"));
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream content;
  content << file.rdbuf();
  return content.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

int FreePort() { return infini::testing::UnusedPortBelowEphemeralRange(); }

}  // namespace infini::launch::testing
