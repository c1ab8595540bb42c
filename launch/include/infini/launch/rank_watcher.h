// No process outlives its run, without a PID namespace (non-root): a tiny
// watcher process, forked by the launcher before the ranks, forks the ranks
// itself and is a child subreaper (PR_SET_CHILD_SUBREAPER), so every orphaned
// descendant of a rank — grandchildren, setsid daemons that double-forked and
// left every process group — is re-parented to it and found as its child.
// It ignores every signal it can and has its own process group, so it
// outlives a launcher that is SIGKILLed (alone or with its process group):
// at end of file on its control pipe (the launcher ended the attempt, or
// died) it SIGKILLs the ranks' process groups, then each of its children,
// reaping them, over and over until it has no child left (what is killed
// hands its own children to the watcher), and exits.
//
// Why this and not a cgroup: a cgroup v2 subtree is writable by an
// unprivileged user only where systemd delegated one (user@UID.service), and
// moving a process there needs write access to the common ancestor of both
// cgroups: a launcher started from an ssh or Slurm shell (session-N.scope,
// the job's cgroup) is never allowed to. The subreaper works for any user on
// any Linux ≥ 3.4. docs/reliability.md says what is still not covered.
//
// The watcher is the ranks' parent, so it relays their wait statuses (exits,
// stops, continues) to the launcher over a pipe.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace infini::launch {

// One rank as the watcher forks it; everything is prepared by the launcher
// before the watcher is forked (the watcher, a fork of a process with
// threads, makes only async-signal-safe calls and never execs itself).
struct RankLaunch {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int stdout_fd = -1;      // write end, becomes the rank's stdout
  int stderr_fd = -1;      // write end, becomes the rank's stderr
  int exec_error_fd = -1;  // write end (O_CLOEXEC): errno when execve fails
};

class RankWatcher {
 public:
  // Forks the watcher, which forks the ranks, each in its own process group
  // and dying with the watcher (PR_SET_PDEATHSIG=SIGKILL), and closes its
  // copies of their pipes. Returns once every rank is forked; null if the watcher could not
  // be forked (`why` says why).
  static std::unique_ptr<RankWatcher> Start(const std::vector<RankLaunch>& ranks, std::string* why);
  // Ends the attempt: the watcher kills what is left of the run and exits;
  // reaps the watcher unless MarkReaped said it was reaped already.
  ~RankWatcher();
  RankWatcher(const RankWatcher&) = delete;
  RankWatcher& operator=(const RankWatcher&) = delete;

  pid_t pid() const { return pid_; }
  // Each rank's pid in the order given, or -errno when its fork failed.
  const std::vector<pid_t>& rank_pids() const { return rank_pids_; }
  // Readable when statuses arrived or the watcher is gone; -1 once gone.
  int status_fd() const { return status_fd_; }
  // Appends the (pid, waitpid status) pairs of ranks relayed since the last
  // call. Never blocks.
  void TakeStatuses(std::vector<std::pair<pid_t, int>>* statuses);
  // The launcher's wait loop reaped the watcher.
  void MarkReaped() { reaped_ = true; }

 private:
  RankWatcher() = default;
  pid_t pid_ = -1;
  int control_fd_ = -1;  // write end: closing it ends the watcher
  int status_fd_ = -1;   // read end of the relayed statuses
  std::string pending_;  // a part of a message
  std::vector<pid_t> rank_pids_;
  bool reaped_ = false;
};

}  // namespace infini::launch
