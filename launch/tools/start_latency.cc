// Measures infini_run's start-up: wall time from launch to exit for N no-op
// ranks, and from launch to the moment the last rank started running (each
// rank prints its CLOCK_MONOTONIC start time, comparable across processes).
//
//   start_latency [--ranks=8] [--runs=50] [--launcher=<bin>/infini_run]
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

long long NowNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * 1000000000LL + now.tv_nsec;
}

std::string FlagValue(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i < argc; ++i) {
    std::string argument = argv[i];
    if (argument.rfind("--" + name + "=", 0) == 0) return argument.substr(name.size() + 3);
  }
  return fallback;
}

std::string SelfDirectory() {
  char path[4096];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  std::string self(path, length > 0 ? static_cast<size_t>(length) : 0);
  return self.substr(0, self.rfind('/'));
}

// Runs the launcher once; returns {exit ms, all-started ms} (started < 0 when
// the ranks printed nothing, e.g. /bin/true).
std::pair<double, double> RunOnce(const std::vector<std::string>& command) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) exit(1);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<char*> argv;
  for (const std::string& word : command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  long long start = NowNs();
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) {
    perror("posix_spawn");
    exit(1);
  }
  close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  for (ssize_t got; (got = read(pipe_fds[0], buffer, sizeof(buffer))) > 0;)
    output.append(buffer, got);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  long long end = NowNs();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "launcher failed: status %d\n", status);
    exit(1);
  }
  long long last_start = -1;
  for (size_t at = output.find("]:"); at != std::string::npos; at = output.find("]:", at + 1)) {
    last_start = std::max(last_start, std::atoll(output.c_str() + at + 2));
  }
  return {(end - start) / 1e6, last_start < 0 ? -1.0 : (last_start - start) / 1e6};
}

void Report(const char* what, std::vector<double> values) {
  std::sort(values.begin(), values.end());
  auto at = [&](double q) { return values[static_cast<size_t>(q * (values.size() - 1))]; };
  printf("%-44s median %7.2f ms  p10 %7.2f  p90 %7.2f  min %7.2f  max %7.2f  (n=%zu)\n", what,
         at(0.5), at(0.1), at(0.9), values.front(), values.back(), values.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--print_start_time") == 0) {
    printf("%lld\n", NowNs());
    return 0;
  }
  const std::string ranks = FlagValue(argc, argv, "ranks", "8");
  const int runs = std::atoi(FlagValue(argc, argv, "runs", "50").c_str());
  const std::string launcher = FlagValue(argc, argv, "launcher", SelfDirectory() + "/infini_run");
  std::vector<double> exit_true, exit_probe, started_probe;
  for (int run = 0; run < runs; ++run) {
    exit_true.push_back(RunOnce({launcher, "--nproc_per_node=" + ranks, "/bin/true"}).first);
    auto [exit_ms, started_ms] =
        RunOnce({launcher, "--nproc_per_node=" + ranks, SelfDirectory() + "/start_latency",
                 "--print_start_time"});
    exit_probe.push_back(exit_ms);
    started_probe.push_back(started_ms);
  }
  Report(("launch -> exit, " + ranks + " x /bin/true").c_str(), exit_true);
  Report(("launch -> all " + ranks + " ranks started").c_str(), started_probe);
  Report(("launch -> exit, " + ranks + " x start-time probe").c_str(), exit_probe);
  return 0;
}
