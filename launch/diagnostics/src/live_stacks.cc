// infini_run --dump_stacks[=RUN_ID]: finds the launchers of this machine's
// live runs through their ranks (a rank's environment holds INFINI_RUN_ID;
// its launcher is the nearest ancestor named infini_run that catches
// SIGUSR2: the watcher and the namespace keeper between them ignore it) and
// sends each SIGUSR2, on which it prints its ranks' stacks (supervisor.cc).
#include "infini/launch/live_stacks.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "infini/common/launch_env.h"
#include "infini/launch/options.h"
#include "infini/launch/proc_files.h"

namespace infini::launch {
namespace {

// The value of `name` in the NUL-separated environment of `pid`; "" if none.
std::string EnvironmentValue(pid_t pid, const std::string& name) {
  const std::string environment = ReadProcFile(pid, "environ");
  const std::string prefix = name + "=";
  for (size_t start = 0; start < environment.size();) {
    size_t end = environment.find('\0', start);
    if (end == std::string::npos) end = environment.size();
    if (environment.compare(start, prefix.size(), prefix) == 0) {
      return environment.substr(start + prefix.size(), end - start - prefix.size());
    }
    start = end + 1;
  }
  return "";
}

// The hex mask after "FIELD:" in /proc/PID/status.
unsigned long long StatusMask(const std::string& status, const std::string& field) {
  const size_t at = status.find("\n" + field + ":");
  if (at == std::string::npos) return 0;
  return std::strtoull(status.c_str() + at + field.size() + 2, nullptr, 16);
}

bool IsLauncher(pid_t pid) {
  std::string comm = ReadProcFile(pid, "comm");
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  if (comm != "infini_run") return false;
  const unsigned long long caught = StatusMask(ReadProcFile(pid, "status"), "SigCgt");
  return (caught >> (SIGUSR2 - 1)) & 1;
}

// Launcher pid -> run id, for every live run of this user whose ranks run here.
std::map<pid_t, std::string> LiveLaunchers() {
  std::map<pid_t, std::string> launchers;
  DIR* proc = opendir("/proc");
  if (!proc) return launchers;
  const uid_t me = getuid();
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || pid == getpid()) continue;
    struct stat info {};
    const std::string folder = std::string("/proc/") + entry->d_name;
    if (stat(folder.c_str(), &info) != 0 || (me != 0 && info.st_uid != me)) continue;
    const std::string run_id = EnvironmentValue(static_cast<pid_t>(pid), env::kRunId);
    if (run_id.empty()) continue;
    // A rank's parent is its launcher, or the watcher whose parent it is.
    pid_t ancestor = ParentOf(static_cast<pid_t>(pid));
    for (int hop = 0; hop < 3 && ancestor > 1; ++hop, ancestor = ParentOf(ancestor)) {
      if (IsLauncher(ancestor)) {
        launchers[ancestor] = run_id;
        break;
      }
    }
  }
  closedir(proc);
  return launchers;
}

}  // namespace

int RequestStacksOfLiveRuns(const std::string& run_id) {
  const std::map<pid_t, std::string> launchers = LiveLaunchers();
  std::set<std::string> runs;
  for (const auto& [pid, run] : launchers) runs.insert(run);
  std::string chosen = run_id;
  if (chosen.empty()) {
    if (runs.size() > 1) {
      std::string names;
      for (const std::string& run : runs) names += (names.empty() ? "" : ", ") + OneLine(run);
      throw UsageError("--dump_stacks: " + std::to_string(runs.size()) +
                       " runs have ranks on this machine (" + names +
                       "): expected --dump_stacks=RUN_ID naming one");
    }
    if (!runs.empty()) chosen = *runs.begin();
  }
  if (!runs.count(chosen)) {
    std::string live;
    for (const std::string& run : runs) live += (live.empty() ? "" : ", ") + OneLine(run);
    throw LaunchError(
        run_id.empty()
            ? std::string("--dump_stacks: no run of this user has ranks on this machine")
            : "--dump_stacks=" + OneLine(run_id) + ": no ranks of run '" + OneLine(run_id) +
                  "' on this machine (runs here: " + (live.empty() ? "none" : live) + ")");
  }
  for (const auto& [pid, run] : launchers) {
    if (run != chosen) continue;
    if (kill(pid, SIGUSR2) != 0) {
      throw LaunchError("--dump_stacks: cannot signal the launcher of run '" + OneLine(run) +
                        "' (pid " + std::to_string(pid) + "): " + strerror(errno));
    }
    std::printf(
        "infini_run: asked the launcher of run '%s' (pid %d) for every rank's stacks: they print "
        "on its stderr (whole in LOG_DIR/%s/attempt_K/rank_N/stacks.log with --log_dir)\n",
        OneLine(run).c_str(), static_cast<int>(pid), OneLine(run).c_str());
  }
  return 0;
}

}  // namespace infini::launch
