// No process outlives its run: this attempt's ranks are forked into a new PID
// namespace whose PID 1 is a tiny keeper process. The kernel kills every
// process of a namespace when its PID 1 exits, and the keeper exits when the
// launcher ends it or dies (PR_SET_PDEATHSIG, and end of file on its pipe),
// so setsid daemons and grandchildren go too, even when the launcher is
// SIGKILLed. Needs CAP_SYS_ADMIN (root); elsewhere Start returns null and
// a RankWatcher (rank_watcher.h) keeps the promise (docs/reliability.md).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

namespace infini::launch {

class PidNamespaceKeeper {
 public:
  // Null when not permitted; `why` then says why.
  static std::unique_ptr<PidNamespaceKeeper> Start(std::string* why);
  // Ends the keeper and so every process left in the namespace; reaps it.
  ~PidNamespaceKeeper();
  PidNamespaceKeeper(const PidNamespaceKeeper&) = delete;
  PidNamespaceKeeper& operator=(const PidNamespaceKeeper&) = delete;

  pid_t pid() const { return pid_; }
  // From Enter to Leave, processes this thread forks start inside the
  // namespace (setns on the thread's namespace for children).
  bool Enter();
  void Leave();
  // The launcher's wait loop reaped the keeper already.
  void MarkReaped() { reaped_ = true; }

 private:
  PidNamespaceKeeper() = default;
  pid_t pid_ = -1;
  int control_fd_ = -1;  // write end: closing it ends the keeper
  int namespace_fd_ = -1;
  int own_namespace_fd_ = -1;
  bool reaped_ = false;
};

// Run in a rank between fork and exec when it is inside the namespace: a
// mount namespace of its own with a /proc of the new PID namespace, so that
// getpid() and /proc/<pid> agree for the program. Best effort.
void MountProcForNamespace();

// Notes the children this process has now, before it starts any: a shell's
// process substitution that became infini_run's child when the shell exec'd
// it (`infini_run > >(tee log)`). KillAdoptedProcesses leaves them alone.
void RememberInheritedChildren();

// Ends every process that was re-parented to this launcher (a child
// subreaper adopts orphaned descendants), other than `except` and the
// inherited children, and reaps them.
void KillAdoptedProcesses(pid_t except);

}  // namespace infini::launch
