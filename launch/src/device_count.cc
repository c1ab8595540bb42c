// --nproc_per_node=auto|gpu|cpu: the launcher asks bin/ccl_info rather than
// linking ccl/ (DESIGN.md: launch/ does not link ccl/).
#include "infini/launch/device_count.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "infini/launch/options.h"

extern char** environ;

namespace infini::launch {
namespace {

constexpr std::chrono::seconds kDeviceQueryTimeout{20};

// Runs `argv`, returns its stdout; throws LaunchError when it cannot be run,
// runs too long or fails.
std::string RunAndCapture(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw LaunchError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  // Its complaints (e.g. an older ccl_info without a flag) are summed up by
  // the caller in one line.
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<char*> raw_argv;
  for (const std::string& word : argv) raw_argv.push_back(const_cast<char*>(word.c_str()));
  raw_argv.push_back(nullptr);
  pid_t pid = -1;
  int spawn_error = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, raw_argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawn_error != 0) {
    close(pipe_fds[0]);
    throw LaunchError(argv[0] + " could not be started: " + strerror(spawn_error));
  }
  std::string output;
  auto deadline = std::chrono::steady_clock::now() + kDeviceQueryTimeout;
  bool timed_out = false;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd entry{pipe_fds[0], POLLIN, 0};
    if (poll(&entry, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    char buffer[256];
    ssize_t got = read(pipe_fds[0], buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    output.append(buffer, static_cast<size_t>(got));
  }
  close(pipe_fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) throw LaunchError(argv[0] + " did not answer within 20 s");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw LaunchError(argv[0] + " failed (status " + std::to_string(status) + ")");
  }
  return output;
}

}  // namespace

int CpuCount() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) return CPU_COUNT(&cpus);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

int BackendDeviceCount(const std::string& bin_dir, const std::string& ccl_backend) {
  std::string ccl_info = bin_dir + "/ccl_info";
  if (access(ccl_info.c_str(), X_OK) != 0) throw LaunchError(ccl_info + " not found");
  // Accelerators only: a host backend's one "device" is not a GPU.
  std::string output =
      RunAndCapture({ccl_info, "--ccl_backend=" + ccl_backend, "--accelerator_count"});
  char* end = nullptr;
  long count = std::strtol(output.c_str(), &end, 10);
  while (end && (*end == '\n' || *end == ' ')) ++end;
  if (end == output.c_str() || (end && *end != '\0') || count < 0) {
    throw LaunchError(ccl_info + " printed '" + OneLine(output) + "', expected a device count");
  }
  return static_cast<int>(count);
}

int VisibleDeviceCount(const std::string& bin_dir, const std::string& ccl_backend) {
  const std::string ccl_info = bin_dir + "/ccl_info";
  if (access(ccl_info.c_str(), X_OK) != 0) return -1;
  try {
    const std::string output =
        RunAndCapture({ccl_info, "--ccl_backend=" + ccl_backend, "--device_count"});
    char* end = nullptr;
    const long count = std::strtol(output.c_str(), &end, 10);
    return end != output.c_str() && count >= 0 ? static_cast<int>(count) : -1;
  } catch (const LaunchError&) {
    return -1;
  }
}

std::string BackendVisibilityVariable(const std::string& bin_dir, const std::string& ccl_backend) {
  std::string ccl_info = bin_dir + "/ccl_info";
  if (access(ccl_info.c_str(), X_OK) != 0) return "";
  std::string output;
  try {
    output = RunAndCapture({ccl_info, "--ccl_backend=" + ccl_backend, "--visibility_variable"});
  } catch (const LaunchError&) {
    return "";  // an older ccl_info: no variable
  }
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  for (char c : output) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return "";
  }
  return output;
}

int ResolveProcessesPerNode(const std::string& value, const std::string& bin_dir,
                            const std::string& ccl_backend) {
  if (value == "cpu") return CpuCount();
  if (value == "gpu" || value == "auto") {
    int devices = 0;
    std::string why;
    try {
      devices = BackendDeviceCount(bin_dir, ccl_backend);
      if (devices == 0) {
        why = "--ccl_backend='" + OneLine(ccl_backend) +
              "' finds no accelerator device on this machine";
      }
    } catch (const LaunchError& error) {
      why = error.what();
    }
    if (devices > 0) return devices;
    if (value == "gpu") {
      throw UsageError("--nproc_per_node=gpu: cannot count devices: " + why +
                       "; give a number instead");
    }
    int cpus = CpuCount();
    fprintf(stderr, "infini_run: --nproc_per_node=auto: %s; using the CPU count, %d\n", why.c_str(),
            cpus);
    return cpus;
  }
  char* end = nullptr;
  long count = std::strtol(value.c_str(), &end, 10);
  // 65536 processes per node: far above any machine's cores or devices, and
  // nnodes x nproc_per_node stays an int (checked in flags.cc).
  if (value.empty() || *end != '\0' || count < 1 || count > 65536) {
    throw UsageError("--nproc_per_node='" + OneLine(value) +
                     "': expected a number in 1..65536, or auto, gpu or cpu");
  }
  return static_cast<int>(count);
}

}  // namespace infini::launch
