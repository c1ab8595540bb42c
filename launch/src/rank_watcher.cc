#include "infini/launch/rank_watcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "infini/launch/file_limit.h"
#include "infini/launch/proc_files.h"
#include "infini/launch/signal_watcher.h"

namespace infini::launch {
namespace {

// One message on the status pipe, written whole (12 bytes < PIPE_BUF: atomic).
struct Message {
  int32_t kind;
  int32_t pid;    // kStarted: the rank's pid, or -errno when its fork failed
  int32_t value;  // kStarted: the rank's index; kStatus: the waitpid status
};
constexpr int32_t kStarted = 1;
constexpr int32_t kStatus = 2;

// What the watcher needs, in the launcher's memory before the fork.
struct Plan {
  const RankLaunch* ranks = nullptr;
  size_t count = 0;
  pid_t* pids = nullptr;   // by rank, filled in the watcher
  char* reaped = nullptr;  // by rank: the watcher reaped it (its group id may be reused)
  int control_read = -1;
  int control_write = -1;
  int status_write = -1;
  pid_t launcher = -1;
};

// The dispositions the watcher inherited (the launcher's), given back to each
// rank before exec, so a rank starts as if the launcher had forked it.
struct sigaction g_launcher_actions[NSIG];

void WakeUp(int) {}

// Everything from here to RunWatcher runs in the watcher or a rank between
// fork and exec: async-signal-safe calls only.

void WriteMessage(int fd, Message message) {
  while (write(fd, &message, sizeof(message)) < 0 && errno == EINTR) {
  }
}

[[noreturn]] void ExecRank(const RankLaunch& rank, pid_t watcher, pid_t launcher) {
  // No handler of the launcher's may run here (SignalWatcher::ResetInChild
  // empties the mask again).
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The watcher may have died before prctl took effect.
  if (getppid() != watcher) _exit(128 + SIGKILL);
  // Yama's ptrace_scope=1: the debugger the launcher starts may read this
  // rank's stacks (stack_dump.h); without Yama this fails, harmlessly.
  prctl(PR_SET_PTRACER, launcher, 0, 0, 0);
  for (int signal_number = 1; signal_number < NSIG; ++signal_number) {
    if (signal_number != SIGKILL && signal_number != SIGSTOP) {
      sigaction(signal_number, &g_launcher_actions[signal_number], nullptr);
    }
  }
  dup2(rank.stdout_fd, STDOUT_FILENO);
  dup2(rank.stderr_fd, STDERR_FILENO);
  SignalWatcher::ResetInChild();  // also empties the signal mask
  RestoreOpenFileLimitInChild();
  execve(rank.path, rank.argv, rank.envp);
  int error = errno;
  [[maybe_unused]] ssize_t ignored = write(rank.exec_error_fd, &error, sizeof(error));
  _exit(127);
}

void CloseRange(int first, int last) {
  if (first > last) return;
  if (syscall(SYS_close_range, static_cast<unsigned>(first), static_cast<unsigned>(last), 0u) == 0)
    return;
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  const long end =
      std::min<long>(last, static_cast<long>(std::min<rlim_t>(limit.rlim_cur, 1 << 20)));
  for (long fd = first; fd <= end; ++fd) close(static_cast<int>(fd));
}

void CloseAllBut(int a, int b) {
  const int low = std::min(a, b), high = std::max(a, b);
  CloseRange(0, low - 1);
  CloseRange(low + 1, high - 1);
  CloseRange(high + 1, INT32_MAX);
}

// struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, name.
constexpr size_t kDirentReclen = 16;
constexpr size_t kDirentName = 19;

// SIGKILLs every child of `self` found in /proc; how many, or -1 without /proc.
int KillChildren(pid_t self) {
  const int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (proc < 0) return -1;
  alignas(8) char buffer[16384];
  int found = 0;
  for (;;) {
    const long got = syscall(SYS_getdents64, proc, buffer, sizeof(buffer));
    if (got <= 0) break;
    for (long at = 0; at < got;) {
      unsigned short record_length;
      memcpy(&record_length, buffer + at + kDirentReclen, sizeof(record_length));
      const char* name = buffer + at + kDirentName;
      at += record_length;
      long pid = 0;
      const char* c = name;
      for (; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
      if (*c != '\0' || pid <= 0) continue;
      if (ParentOf(static_cast<pid_t>(pid)) == self) {
        kill(static_cast<pid_t>(pid), SIGKILL);
        ++found;
      }
    }
  }
  close(proc);
  return found;
}

// The end of the run: every process left is a descendant of the watcher,
// and as the subreaper it inherits the children of each one it kills. So:
// kill the ranks' groups, then kill all its children and reap, until it has
// none. Group ids of ranks it reaped already are not used (one may be reused).
void KillTheRun(const Plan& plan, pid_t self) {
  for (size_t i = 0; i < plan.count; ++i) {
    if (plan.pids[i] > 0 && !plan.reaped[i]) kill(-plan.pids[i], SIGKILL);
  }
  for (;;) {
    const int found = KillChildren(self);
    int status;
    if (found < 0) {
      // No /proc: the groups' deaths are all that could be done.
      while (waitpid(-1, &status, WNOHANG) > 0) {
      }
      return;
    }
    pid_t pid;
    do {
      pid = waitpid(-1, &status, 0);  // a child exists, or ECHILD: none is left
    } while (pid < 0 && errno == EINTR);
    if (pid < 0) return;
    while (waitpid(-1, &status, WNOHANG) > 0) {
    }
  }
}

[[noreturn]] void RunWatcher(const Plan& plan) {
  close(plan.control_write);
  // Its own group: a signal to the launcher's group (kill -9 -PGID, a
  // terminal's Ctrl-C) does not reach it.
  setpgid(0, 0);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  prctl(PR_SET_NAME, "infini_watcher");  // what ps -o comm and top show
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction wake {};
  wake.sa_handler = WakeUp;  // no SA_NOCLDSTOP: stops are relayed too
  for (int signal_number = 1; signal_number < NSIG; ++signal_number) {
    if (signal_number == SIGKILL || signal_number == SIGSTOP) continue;
    sigaction(signal_number, nullptr, &g_launcher_actions[signal_number]);
    sigaction(signal_number, signal_number == SIGCHLD ? &wake : &ignore, nullptr);
  }
  sigset_t child_signal, none;
  sigemptyset(&child_signal);
  sigaddset(&child_signal, SIGCHLD);
  sigemptyset(&none);
  // SIGCHLD only arrives inside ppoll, so no child event is missed.
  sigprocmask(SIG_BLOCK, &child_signal, nullptr);
  const pid_t self = getpid();
  if (getppid() != plan.launcher) _exit(0);  // the launcher died already

  for (size_t i = 0; i < plan.count; ++i) {
    const pid_t pid = fork();
    if (pid == 0) ExecRank(plan.ranks[i], self, plan.launcher);
    const int fork_error = errno;
    // Also here, so the group exists before the launcher may signal it.
    if (pid > 0) setpgid(pid, pid);
    plan.pids[i] = pid;
    WriteMessage(plan.status_write,
                 {kStarted, pid > 0 ? pid : -fork_error, static_cast<int32_t>(i)});
  }
  // Nothing of the launcher's but the two pipes: the ranks' pipes end when
  // they do, and no socket or file of the launcher is held open.
  CloseAllBut(plan.control_read, plan.status_write);

  for (;;) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED)) > 0) {
      for (size_t i = 0; i < plan.count; ++i) {
        if (plan.pids[i] != pid) continue;
        if (!WIFSTOPPED(status) && !WIFCONTINUED(status)) plan.reaped[i] = 1;
        WriteMessage(plan.status_write, {kStatus, pid, status});
      }
      // Other pids: orphans adopted as subreaper, reaped; they end with the run.
    }
    pollfd control{plan.control_read, POLLIN, 0};
    const int ready = ppoll(&control, 1, nullptr, &none);
    if (ready < 0 && errno == EINTR) continue;  // SIGCHLD
    // End of file: the launcher ended the attempt, or died (never writes).
    break;
  }
  close(plan.status_write);
  KillTheRun(plan, self);
  _exit(0);
}

}  // namespace

std::unique_ptr<RankWatcher> RankWatcher::Start(const std::vector<RankLaunch>& ranks,
                                                std::string* why) {
  int control[2], status[2];
  if (pipe2(control, O_CLOEXEC) != 0) {
    *why = std::string("pipe: ") + strerror(errno);
    return nullptr;
  }
  if (pipe2(status, O_CLOEXEC) != 0) {
    *why = std::string("pipe: ") + strerror(errno);
    close(control[0]);
    close(control[1]);
    return nullptr;
  }
  std::vector<pid_t> pids(ranks.size(), 0);
  std::vector<char> reaped(ranks.size(), 0);
  Plan plan;
  plan.ranks = ranks.data();
  plan.count = ranks.size();
  plan.pids = pids.data();
  plan.reaped = reaped.data();
  plan.control_read = control[0];
  plan.control_write = control[1];
  plan.status_write = status[1];
  plan.launcher = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    close(status[0]);
    RunWatcher(plan);
  }
  const int fork_error = errno;
  close(control[0]);
  close(status[1]);
  if (pid < 0) {
    close(control[1]);
    close(status[0]);
    *why = std::string("fork: ") + strerror(fork_error);
    return nullptr;
  }
  std::unique_ptr<RankWatcher> watcher(new RankWatcher());
  watcher->pid_ = pid;
  watcher->control_fd_ = control[1];
  watcher->status_fd_ = status[0];
  // ECHILD: the watcher ended before it forked that rank.
  watcher->rank_pids_.assign(ranks.size(), -ECHILD);
  for (size_t started = 0; started < ranks.size();) {
    Message message{};
    ssize_t got;
    do {
      got = read(status[0], &message, sizeof(message));
    } while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(sizeof(message))) break;
    if (message.kind != kStarted || message.value < 0 ||
        static_cast<size_t>(message.value) >= ranks.size()) {
      continue;
    }
    watcher->rank_pids_[static_cast<size_t>(message.value)] = message.pid;
    ++started;
  }
  fcntl(status[0], F_SETFL, fcntl(status[0], F_GETFL) | O_NONBLOCK);
  return watcher;
}

RankWatcher::~RankWatcher() {
  // The status pipe first: a watcher blocked writing to it goes on.
  if (status_fd_ >= 0) close(status_fd_);
  if (control_fd_ >= 0) close(control_fd_);
  if (pid_ > 0 && !reaped_) {
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void RankWatcher::TakeStatuses(std::vector<std::pair<pid_t, int>>* statuses) {
  if (status_fd_ < 0) return;
  char buffer[4096];
  for (;;) {
    const ssize_t got = read(status_fd_, buffer, sizeof(buffer));
    if (got > 0) {
      pending_.append(buffer, static_cast<size_t>(got));
      continue;
    }
    if (got == 0) {  // the watcher is gone
      close(status_fd_);
      status_fd_ = -1;
    }
    if (got < 0 && errno == EINTR) continue;
    break;
  }
  size_t at = 0;
  for (; pending_.size() - at >= sizeof(Message); at += sizeof(Message)) {
    Message message;
    memcpy(&message, pending_.data() + at, sizeof(message));
    if (message.kind == kStatus) statuses->emplace_back(message.pid, message.value);
  }
  pending_.erase(0, at);
}

}  // namespace infini::launch
