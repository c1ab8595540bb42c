#include "launcher_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
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

bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  // A zombie is dead; its parent (init or the launcher) just did not reap it yet.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close_paren = text.rfind(')');
  return text.empty() || (close_paren != std::string::npos && close_paren + 2 < text.size() &&
                          text[close_paren + 2] == 'Z');
}

}  // namespace

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "infini_launch_test_XXXXXX");
  char* made = mkdtemp(pattern.data());
  path_ = made ? made : "";
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

LauncherProcess::LauncherProcess(const std::vector<std::string>& arguments) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, (capture_.path() + "/out").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, (capture_.path() + "/err").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> words = {LauncherPath()};
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  started_ = Clock::now();
  if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&actions);
}

LauncherProcess::~LauncherProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
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

bool AllRecordedProcessesGone(const std::string& dir, std::chrono::milliseconds bound) {
  auto deadline = Clock::now() + bound;
  while (true) {
    bool all_gone = true;
    for (pid_t pid : RecordedPids(dir)) all_gone = all_gone && pid > 0 && ProcessGone(pid);
    if (all_gone) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
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
