#include "infini/launch/pid_namespace.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "infini/launch/proc_files.h"
#include "infini/launch/supervisor.h"

namespace infini::launch {
namespace {

// The keeper's whole life; only async-signal-safe calls (the launcher has
// threads, and this child of a raw clone never execs).
[[noreturn]] void RunKeeper(int control_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int signal_number = 1; signal_number < NSIG; ++signal_number) {
    if (signal_number != SIGKILL && signal_number != SIGSTOP) {
      sigaction(signal_number, &ignore, nullptr);
    }
  }
  // SIGCHLD ignored: orphans re-parented to this PID 1 are reaped by the kernel.
  if (control_fd > 0) syscall(SYS_close_range, 0u, static_cast<unsigned>(control_fd) - 1, 0u);
  syscall(SYS_close_range, static_cast<unsigned>(control_fd) + 1, ~0u, 0u);
  char byte;
  while (read(control_fd, &byte, 1) != 0) {
    if (errno != EINTR) break;
  }
  _exit(0);
}

// Children the launcher had before it started any: `infini_run > >(tee log)`
// makes bash fork the tee, then exec infini_run, whose child the tee becomes.
// They are the user's: never signalled, reaped or waited for.
std::vector<pid_t>& InheritedChildren() {
  static std::vector<pid_t> pids;
  return pids;
}

bool IsInherited(pid_t pid) {
  const std::vector<pid_t>& inherited = InheritedChildren();
  return std::find(inherited.begin(), inherited.end(), pid) != inherited.end();
}

std::vector<pid_t> ChildrenOf(pid_t parent, pid_t except) {
  std::vector<pid_t> children;
  DIR* proc = opendir("/proc");
  if (!proc) return children;
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == except || IsInherited(static_cast<pid_t>(pid))) {
      continue;
    }
    if (ParentOf(static_cast<pid_t>(pid)) == parent) children.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return children;
}

}  // namespace

std::unique_ptr<PidNamespaceKeeper> PidNamespaceKeeper::Start(std::string* why) {
  int control[2];
  if (pipe2(control, O_CLOEXEC) != 0) {
    *why = std::string("pipe: ") + strerror(errno);
    return nullptr;
  }
  const long pid = syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid == 0) {
    close(control[1]);
    RunKeeper(control[0]);
  }
  const int clone_error = errno;
  close(control[0]);
  if (pid < 0) {
    close(control[1]);
    *why = std::string("clone(CLONE_NEWPID): ") + strerror(clone_error);
    return nullptr;
  }
  std::unique_ptr<PidNamespaceKeeper> keeper(new PidNamespaceKeeper());
  keeper->pid_ = static_cast<pid_t>(pid);
  keeper->control_fd_ = control[1];
  keeper->namespace_fd_ =
      open(("/proc/" + std::to_string(pid) + "/ns/pid").c_str(), O_RDONLY | O_CLOEXEC);
  keeper->own_namespace_fd_ = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
  if (keeper->namespace_fd_ < 0 || keeper->own_namespace_fd_ < 0) {
    *why = std::string("cannot open the namespace: ") + strerror(errno);
    return nullptr;  // the destructor ends the keeper
  }
  return keeper;
}

PidNamespaceKeeper::~PidNamespaceKeeper() {
  if (control_fd_ >= 0) close(control_fd_);
  if (namespace_fd_ >= 0) close(namespace_fd_);
  if (own_namespace_fd_ >= 0) close(own_namespace_fd_);
  if (pid_ > 0 && !reaped_) {
    // Closing the pipe ends it; SIGKILL too, in case a rank still holds the
    // pipe's write end between its fork and exec.
    kill(pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

bool PidNamespaceKeeper::Enter() { return setns(namespace_fd_, CLONE_NEWPID) == 0; }

void PidNamespaceKeeper::Leave() { setns(own_namespace_fd_, CLONE_NEWPID); }

void MountProcForNamespace() {
  if (unshare(CLONE_NEWNS) != 0) return;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return;
  mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
}

void MakeLauncherASubreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }

void RememberInheritedChildren() { InheritedChildren() = ChildrenOf(getpid(), -1); }

void KillAdoptedProcesses(pid_t except) {
  const pid_t self = getpid();
  // Each round may adopt the children of the ones just killed; bounded.
  for (int round = 0; round < 50; ++round) {
    std::vector<pid_t> adopted = ChildrenOf(self, except);
    if (adopted.empty()) return;
    for (pid_t pid : adopted) kill(pid, SIGKILL);
    for (pid_t pid : adopted) {
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
}

}  // namespace infini::launch
