// The supervision loop: one thread, poll() over the self-pipe of signals and
// every rank's output pipes.
#include "infini/launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "infini/launch/console.h"
#include "infini/launch/failure_summary.h"
#include "infini/launch/file_limit.h"
#include "infini/launch/options.h"
#include "infini/launch/pid_namespace.h"
#include "infini/launch/proc_files.h"
#include "infini/launch/rank_watcher.h"
#include "infini/launch/signal_watcher.h"

namespace infini::launch {
namespace {

using Clock = std::chrono::steady_clock;

// After every rank exited, how long stray processes that still hold a rank's
// pipes get before the pipes are closed anyway.
constexpr std::chrono::seconds kPipeDrainGrace{1};

struct Child {
  const RankSpec* spec = nullptr;
  std::unique_ptr<RankOutput> output;
  pid_t pid = -1;
  bool running = false;
  int pipe_fd[2] = {-1, -1};  // read ends: stdout, stderr
  int exec_error_fd = -1;
  std::optional<std::chrono::steady_clock::time_point> stopped_since;
  int stop_signal = 0;
  bool lost = false;         // --on_failure=shrink: published as lost, the others went on
  bool stacks_read = false;  // as the stuck rank (ReadReportedStacks)
  RankExit exit;
};

void ClosePipe(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// A rank's command line, environment and pipes, made before any fork.
struct Prepared {
  std::vector<char*> argv, envp;
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  int exec_pipe[2] = {-1, -1};
};

// False, with the child's spawn failure recorded, when a pipe cannot be made.
bool Prepare(Child* child, Prepared* prepared) {
  const RankSpec& spec = *child->spec;
  for (const std::string& word : spec.argv)
    prepared->argv.push_back(const_cast<char*>(word.c_str()));
  prepared->argv.push_back(nullptr);
  for (const std::string& entry : spec.environment)
    prepared->envp.push_back(const_cast<char*>(entry.c_str()));
  prepared->envp.push_back(nullptr);
  int* const pipes[] = {prepared->out_pipe, prepared->err_pipe, prepared->exec_pipe};
  for (int* fds : pipes) {
    if (pipe2(fds, O_CLOEXEC) == 0) continue;
    child->exit.spawn_failed = true;
    child->exit.detail = std::string("cannot create pipes: ") + strerror(errno);
    for (int* opened : pipes) {
      for (int i = 0; i < 2; ++i) ClosePipe(&opened[i]);
    }
    return false;
  }
  return true;
}

// The launcher's side once the rank is forked (`pid`) or its fork failed
// (-errno): closes the write ends, keeps the read ends.
void Started(Child* child, Prepared* prepared, pid_t pid) {
  ClosePipe(&prepared->out_pipe[1]);
  ClosePipe(&prepared->err_pipe[1]);
  ClosePipe(&prepared->exec_pipe[1]);
  if (pid < 0) {
    child->exit.spawn_failed = true;
    child->exit.detail = std::string("fork failed: ") + strerror(-pid);
    ClosePipe(&prepared->out_pipe[0]);
    ClosePipe(&prepared->err_pipe[0]);
    ClosePipe(&prepared->exec_pipe[0]);
    return;
  }
  child->pid = pid;
  child->exit.pid = pid;
  child->running = true;
  child->pipe_fd[RankOutput::kStdout] = prepared->out_pipe[0];
  child->pipe_fd[RankOutput::kStderr] = prepared->err_pipe[0];
  for (int fd : child->pipe_fd) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  child->exec_error_fd = prepared->exec_pipe[0];
}

// Forks and execs one rank from the launcher. Everything the child touches
// is prepared before fork: the launcher may have threads (the store server),
// so the child may only make async-signal-safe calls until exec.
// `in_namespace`: the child starts in the keeper's PID namespace, where its
// parent (outside) reads as pid 0.
void ForkAndExec(Child* child, Prepared* prepared, pid_t launcher_pid, bool in_namespace) {
  const char* path = child->spec->program_path.c_str();
  const int out_write = prepared->out_pipe[1];
  const int err_write = prepared->err_pipe[1];
  const int exec_write = prepared->exec_pipe[1];
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The launcher may have died before prctl took effect.
    if (getppid() != (in_namespace ? 0 : launcher_pid)) _exit(128 + SIGKILL);
    // Yama's ptrace_scope=1: the launcher's debugger may read the stacks
    // (stack_dump.h). In a namespace the launcher has no pid here; it is
    // root there, which Yama's scope 1 lets attach anyway.
    if (!in_namespace) prctl(PR_SET_PTRACER, launcher_pid, 0, 0, 0);
    if (in_namespace) MountProcForNamespace();
    dup2(out_write, STDOUT_FILENO);
    dup2(err_write, STDERR_FILENO);
    SignalWatcher::ResetInChild();
    RestoreOpenFileLimitInChild();
    execve(path, prepared->argv.data(), prepared->envp.data());
    int error = errno;
    [[maybe_unused]] ssize_t ignored = write(exec_write, &error, sizeof(error));
    _exit(127);
  }
  const int fork_error = errno;
  // Also here, so the group exists before the launcher may signal it.
  if (pid > 0) setpgid(pid, pid);
  Started(child, prepared, pid > 0 ? pid : -fork_error);
  if (pid > 0 && in_namespace) child->exit.namespace_pid = InnermostPidOf(pid);
}

void Spawn(Child* child, pid_t launcher_pid, bool in_namespace) {
  Prepared prepared;
  if (Prepare(child, &prepared)) ForkAndExec(child, &prepared, launcher_pid, in_namespace);
}

// Blocks until the child has exec'd (the pipe closes) or reports why not.
void CollectExecResult(Child* child) {
  if (child->exec_error_fd < 0) return;
  int error = 0;
  ssize_t got;
  do {
    got = read(child->exec_error_fd, &error, sizeof(error));
  } while (got < 0 && errno == EINTR);
  ClosePipe(&child->exec_error_fd);
  if (got == sizeof(error)) {
    child->exit.spawn_failed = true;
    child->exit.detail = "exec of " + child->spec->program_path + " failed: " + strerror(error);
  }
}

class AttemptSupervisor {
 public:
  AttemptSupervisor(const std::vector<RankSpec>& ranks, const SupervisorOptions& options)
      : options_(options), children_(ranks.size()) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      children_[i].spec = &ranks[i];
      children_[i].exit.local_rank = ranks[i].local_rank;
      children_[i].exit.global_rank = ranks[i].global_rank;
      RankOutputOptions output = ranks[i].output;
      if (options_.capture_stuck_stacks) {
        output.on_line = [this](const std::string& line) {
          const int process_rank = StuckProcessRankInLine(line);
          if (process_rank < 0) return;
          stuck_reported_.push_back(process_rank);
          if (stuck_named_ < 0) stuck_named_ = process_rank;
        };
      }
      children_[i].output = std::make_unique<RankOutput>(output);
    }
  }

  AttemptResult Run() {
    const pid_t launcher_pid = getpid();
    if (options_.use_pid_namespace) {
      std::string why;
      keeper_ = PidNamespaceKeeper::Start(&why);
    }
    if (keeper_) {
      const bool in_namespace = keeper_->Enter();
      for (Child& child : children_) Spawn(&child, launcher_pid, in_namespace);
      if (in_namespace) keeper_->Leave();
    } else {
      SpawnThroughWatcher(launcher_pid);
    }
    for (Child& child : children_) CollectExecResult(&child);
    result_.all_started = Clock::now();
    for (Child& child : children_) {
      if (child.exit.spawn_failed && !child.running) RecordFailure(&child);
    }
    Loop();
    // What is left of the run: the namespace (its PID 1 ends it), or what
    // the watcher adopted (it kills it), and orphans this subreaper adopted.
    const pid_t keeper_pid = keeper_ ? keeper_->pid() : -1;
    keeper_.reset();
    watcher_.reset();
    KillAdoptedProcesses(keeper_pid);
    for (Child& child : children_) {
      child.output->FlushPartialLines();
      child.exit.tail = child.output->tail();
      result_.ranks.push_back(child.exit);
    }
    if (first_failure_index_ < 0 && !stopping_ && !lost_indexes_.empty()) {
      // Shrink: the run went on; it succeeded when a rank finished.
      const bool finished = std::any_of(children_.begin(), children_.end(), [](const Child& c) {
        return !c.exit.failed() && !c.exit.stopped_by_launcher;
      });
      if (!finished && !options_.ranks_on_other_nodes) {
        result_.outcome = AttemptOutcome::kRankFailed;
        first_failure_index_ = lost_indexes_.front();
      }
    }
    if (first_failure_index_ >= 0) {
      result_.first_failure = result_.ranks[static_cast<size_t>(first_failure_index_)];
    }
    return result_;
  }

 private:
  bool AnyRunning() const {
    return std::any_of(children_.begin(), children_.end(),
                       [](const Child& c) { return c.running; });
  }
  bool AnyPipeOpen() const {
    return std::any_of(children_.begin(), children_.end(),
                       [](const Child& c) { return c.pipe_fd[0] >= 0 || c.pipe_fd[1] >= 0; });
  }

  // Without a PID namespace: the watcher (rank_watcher.h) forks the ranks,
  // so that nothing of theirs outlives the run even when this launcher is
  // SIGKILLed. If it cannot be forked, the launcher forks them itself (and
  // only its subreaper sweep at the end of the attempt is left).
  void SpawnThroughWatcher(pid_t launcher_pid) {
    std::vector<Prepared> prepared(children_.size());
    std::vector<RankLaunch> launches;
    std::vector<size_t> launched;
    for (size_t i = 0; i < children_.size(); ++i) {
      if (!Prepare(&children_[i], &prepared[i])) continue;
      launches.push_back({children_[i].spec->program_path.c_str(), prepared[i].argv.data(),
                          prepared[i].envp.data(), prepared[i].out_pipe[1], prepared[i].err_pipe[1],
                          prepared[i].exec_pipe[1]});
      launched.push_back(i);
    }
    std::string why;
    if (!launches.empty()) watcher_ = RankWatcher::Start(launches, &why);
    for (size_t k = 0; k < launched.size(); ++k) {
      const size_t i = launched[k];
      if (watcher_) {
        Started(&children_[i], &prepared[i], watcher_->rank_pids()[k]);
      } else {
        ForkAndExec(&children_[i], &prepared[i], launcher_pid, false);
      }
    }
  }

  // How a rank's wait status (from waitpid or relayed by the watcher) changes it.
  void OnStatus(pid_t pid, int status) {
    for (Child& child : children_) {
      if (child.pid != pid || !child.running) continue;
      if (WIFSTOPPED(status)) {
        child.stopped_since = Clock::now();
        child.stop_signal = WSTOPSIG(status);
        continue;
      }
      if (WIFCONTINUED(status)) {
        child.stopped_since.reset();
        continue;
      }
      child.running = false;
      child.stopped_since.reset();
      if (WIFEXITED(status)) {
        child.exit.exited = true;
        child.exit.exit_code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        child.exit.signal_number = WTERMSIG(status);
      }
      if (child.exit.failed()) RecordFailure(&child);
    }
  }

  void SignalGroups(int signal_number) {
    for (Child& child : children_) {
      // Groups of ranks that already exited too: what is left of them is a
      // stray descendant. A group id is not reused while its group lives.
      if (child.pid > 0) kill(-child.pid, signal_number);
      // A stopped rank only acts on SIGTERM once continued.
      if (child.pid > 0 && signal_number == SIGTERM) kill(-child.pid, SIGCONT);
    }
  }

  void BeginStop(AttemptOutcome reason) {
    if (stopping_) return;
    stopping_ = true;
    result_.outcome = reason;
    for (Child& child : children_) {
      if (child.running) child.exit.stopped_by_launcher = true;
    }
    SignalGroups(SIGTERM);
    kill_deadline_ = Clock::now() + options_.term_timeout;
  }

  void RecordFailure(Child* child) {
    if (child->lost) return;  // a stopped rank killed on its loss, now reaped
    const bool others_running =
        std::any_of(children_.begin(), children_.end(),
                    [child](const Child& c) { return &c != child && c.running; });
    if (options_.on_rank_lost && first_failure_index_ < 0 && !stopping_ &&
        (others_running || options_.ranks_on_other_nodes)) {
      // A stopped rank is lost too: it must not come back into a world that
      // went on without it.
      if (child->running) {
        kill(-child->pid, SIGKILL);
        kill(-child->pid, SIGCONT);
        child->stopped_since.reset();
      }
      const int64_t unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
      if (options_.on_rank_lost(child->exit)) {
        child->lost = true;
        result_.lost.push_back({child->exit, unix_ms});
        lost_indexes_.push_back(static_cast<int>(child - children_.data()));
        return;
      }
    }
    if (first_failure_index_ < 0 && !stopping_) {
      first_failure_index_ = static_cast<int>(child - children_.data());
      child->exit.stuck_rank_named = stuck_named_;
      if (options_.on_first_failure) options_.on_first_failure(child->exit);
      BeginStop(AttemptOutcome::kRankFailed);
    }
  }

  void Reap() {
    if (watcher_) {
      std::vector<std::pair<pid_t, int>> relayed;
      watcher_->TakeStatuses(&relayed);
      for (auto [pid, status] : relayed) OnStatus(pid, status);
    }
    // Only what this attempt started (never waitpid(-1): inherited children
    // are the user's); KillAdoptedProcesses reaps adopted orphans at the end.
    std::vector<pid_t> started;
    for (const Child& child : children_) started.push_back(child.running ? child.pid : -1);
    if (keeper_) started.push_back(keeper_->pid());
    if (watcher_) started.push_back(watcher_->pid());
    int status = 0;
    for (pid_t pid : started) {
      while (pid > 0 && waitpid(pid, &status, WNOHANG | WUNTRACED | WCONTINUED) == pid) {
        const bool ended = !WIFSTOPPED(status) && !WIFCONTINUED(status);
        if (keeper_ && pid == keeper_->pid() && ended) keeper_->MarkReaped();
        if (watcher_ && pid == watcher_->pid()) {
          if (ended) watcher_->MarkReaped();
          // Stopped, it would relay nothing: the run would never end.
          if (WIFSTOPPED(status)) kill(pid, SIGCONT);
        }
        OnStatus(pid, status);
        if (ended) break;
      }
    }
  }

  void CheckStoppedRanks(Clock::time_point now) {
    for (Child& child : children_) {
      if (child.running && child.stopped_since &&
          now >= *child.stopped_since + options_.stopped_rank_timeout) {
        child.exit.stalled_by_signal = child.stop_signal;
        RecordFailure(&child);
        return;
      }
    }
  }

  // `capture`: read already (several at once); else read here.
  RankStacks ReadStacks(const Child& child, const std::string& header,
                        std::optional<StackCapture> capture = std::nullopt) {
    RankStacks stacks;
    stacks.local_rank = child.spec->local_rank;
    stacks.global_rank = child.spec->global_rank;
    stacks.pid = child.pid;
    stacks.capture = capture ? *capture : CaptureStacks(child.pid, options_.stacks);
    if (!child.spec->log_folder.empty() && !stacks.capture.whole.empty()) {
      stacks.log_file = AppendStacksToLog(child.spec->log_folder, header, stacks.capture.whole,
                                          &stacks.log_error);
    }
    return stacks;
  }

  // A flight recorder named a process of this node as the one a hang waits
  // on: its stacks are read now, while it still runs (the reporter's exit
  // is what stops the run). Once per rank; another node's rank is read by
  // that node's launcher.
  void ReadReportedStacks() {
    std::vector<int> reported;
    reported.swap(stuck_reported_);
    for (int process_rank : reported) {
      for (Child& child : children_) {
        if (child.spec->global_rank != process_rank || !child.running || child.stacks_read) {
          continue;
        }
        child.stacks_read = true;
        result_.stuck_stacks.push_back(
            ReadStacks(child, "==== stacks of the stuck rank " + std::to_string(process_rank) +
                                  ", read before infini_run stopped it ===="));
      }
    }
  }

  // SIGUSR2 (infini_run --dump_stacks): every running rank's stacks, read
  // at once, to the console's stderr, trimmed when the whole ones went to a
  // log file; the run goes on.
  void PrintEveryRanksStacks() {
    std::vector<const Child*> running;
    std::vector<pid_t> pids;
    for (const Child& child : children_) {
      if (!child.running) continue;
      running.push_back(&child);
      pids.push_back(child.pid);
    }
    const std::vector<StackCapture> captures = CaptureStacksAtOnce(pids, options_.stacks);
    for (size_t k = 0; k < running.size(); ++k) {
      const RankStacks stacks =
          ReadStacks(*running[k],
                     "==== stacks of rank " + std::to_string(running[k]->spec->global_rank) +
                         ", asked for by SIGUSR2 (infini_run --dump_stacks) ====",
                     captures[k]);
      const std::string text =
          FormatRankStacks(stacks, "infini_run: ", "on SIGUSR2", stacks.log_file.empty());
      for (size_t start = 0, end; start < text.size(); start = end + 1) {
        end = text.find('\n', start);
        Console::Get().WriteLine(Console::kStderr, text.substr(start, end - start + 1));
      }
    }
  }

  void HandleSignals() {
    for (int signal_number : SignalWatcher::TakeSignals()) {
      if (signal_number == SIGCHLD) continue;
      if (signal_number == SIGUSR2) {
        if (!stopping_) PrintEveryRanksStacks();
        continue;
      }
      if (!stopping_) {
        result_.launcher_signal = signal_number;
        BeginStop(AttemptOutcome::kSignalled);
      } else if (!killed_) {
        // A second Ctrl-C: do not wait out the grace period.
        SignalGroups(SIGKILL);
        killed_ = true;
      }
    }
    Reap();
  }

  int PollTimeoutMs(Clock::time_point now) const {
    std::optional<Clock::time_point> wake;
    auto earliest = [&](Clock::time_point t) { wake = wake ? std::min(*wake, t) : t; };
    if (stopping_ && !killed_) earliest(kill_deadline_);
    if (!stopping_ && options_.peer_monitor) earliest(next_monitor_);
    if (drain_deadline_) earliest(*drain_deadline_);
    if (!stopping_) {
      for (const Child& child : children_) {
        if (child.stopped_since) earliest(*child.stopped_since + options_.stopped_rank_timeout);
      }
    }
    if (!wake) return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*wake - now).count();
    return static_cast<int>(std::clamp<long long>(left + 1, 0, 1 << 30));
  }

  void Loop() {
    next_monitor_ = Clock::now() + options_.monitor_interval;
    Reap();
    while (AnyRunning() || AnyPipeOpen()) {
      Clock::time_point now = Clock::now();
      if (!AnyRunning() && !drain_deadline_) {
        // Every rank exited; whatever still holds a pipe is a stray
        // descendant of one: ask it to go, then stop reading.
        SignalGroups(SIGTERM);
        drain_deadline_ = now + kPipeDrainGrace;
      }
      std::vector<pollfd> fds;
      std::vector<std::pair<Child*, int>> owners;
      fds.push_back({SignalWatcher::fd(), POLLIN, 0});
      owners.emplace_back(nullptr, -1);
      const int status_fd = watcher_ ? watcher_->status_fd() : -1;
      if (status_fd >= 0) {
        fds.push_back({status_fd, POLLIN, 0});
        owners.emplace_back(nullptr, -1);
      }
      const size_t first_console = fds.size();
      Console::Get().AddPollEntries(&fds);
      owners.resize(fds.size(), {nullptr, -1});
      const size_t first_pipe = fds.size();
      for (Child& child : children_) {
        for (int stream = 0; stream < 2; ++stream) {
          if (child.pipe_fd[stream] < 0) continue;
          fds.push_back({child.pipe_fd[stream], POLLIN, 0});
          owners.emplace_back(&child, stream);
        }
      }
      int ready = poll(fds.data(), fds.size(), PollTimeoutMs(now));
      if (ready < 0 && errno != EINTR) break;
      if (ready > 0 && first_pipe > first_console) Console::Get().WriteQueued();
      for (size_t i = first_pipe; ready > 0 && i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        auto [child, stream] = owners[i];
        auto which = static_cast<RankOutput::Stream>(stream);
        if (!child->output->Drain(which, child->pipe_fd[stream]))
          ClosePipe(&child->pipe_fd[stream]);
      }
      if (!stuck_reported_.empty()) ReadReportedStacks();
      if (ready > 0 && (fds[0].revents & POLLIN)) HandleSignals();
      if (ready > 0 && status_fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) Reap();
      now = Clock::now();
      if (stopping_ && !killed_ && now >= kill_deadline_) {
        SignalGroups(SIGKILL);
        killed_ = true;
      }
      if (!stopping_) CheckStoppedRanks(now);
      if (!stopping_ && options_.peer_monitor && now >= next_monitor_) {
        if (options_.peer_monitor()) {
          // Another node's flight recorder may have named a rank of this node.
          const int named =
              options_.stuck_rank_named_by_peer ? options_.stuck_rank_named_by_peer() : -1;
          if (named >= 0 && options_.capture_stuck_stacks) {
            stuck_reported_.push_back(named);
            ReadReportedStacks();
          }
          BeginStop(AttemptOutcome::kStoppedByPeer);
        }
        next_monitor_ = Clock::now() + options_.monitor_interval;
      }
      if (drain_deadline_ && now >= *drain_deadline_) {
        SignalGroups(SIGKILL);
        for (Child& child : children_) {
          for (int& fd : child.pipe_fd) {
            if (fd >= 0)
              child.output->Drain(static_cast<RankOutput::Stream>(&fd - child.pipe_fd), fd);
            ClosePipe(&fd);
          }
        }
      }
    }
    Reap();
  }

  SupervisorOptions options_;
  std::vector<Child> children_;
  AttemptResult result_;
  int first_failure_index_ = -1;
  std::vector<int> lost_indexes_;    // children lost under shrink, in order
  std::vector<int> stuck_reported_;  // process ranks named behind, not read yet
  int stuck_named_ = -1;             // the first process rank named behind here
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_deadline_;
  Clock::time_point next_monitor_;
  std::optional<Clock::time_point> drain_deadline_;
  std::unique_ptr<PidNamespaceKeeper> keeper_;
  std::unique_ptr<RankWatcher> watcher_;
};

}  // namespace

AttemptResult RunAttempt(const std::vector<RankSpec>& ranks, const SupervisorOptions& options) {
  AttemptSupervisor supervisor(ranks, options);
  return supervisor.Run();
}

}  // namespace infini::launch
