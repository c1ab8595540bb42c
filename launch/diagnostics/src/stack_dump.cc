// Stacks through gdb: attach, print every thread's backtrace twice (whole,
// then without addresses and with arguments elided, which TrimStacks
// shortens), detach.
// A stopped rank (SIGSTOP) stays stopped after the detach.
#include "infini/launch/stack_dump.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "infini/common/one_line.h"

namespace infini::launch {
namespace {

using Clock = std::chrono::steady_clock;

// Between fork and exec of the stack tool (async-signal-safe calls only):
// every disposition the launcher set back to default and nothing blocked,
// as a process started from a shell would have them.
void ResetSignalsInChild() {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  for (int signal_number = 1; signal_number < NSIG; ++signal_number) {
    sigaction(signal_number, &action, nullptr);  // SIGKILL, SIGSTOP: refused, harmless
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Printed between gdb's two backtraces.
constexpr char kTrimmedMarker[] = "==== infini_run: the same, without addresses and arguments ====";

// `tool` as an executable path: itself when it has a '/', else the first
// PATH entry that holds it; "" when there is none.
std::string FindTool(const std::string& tool) {
  if (tool.find('/') != std::string::npos) return access(tool.c_str(), X_OK) == 0 ? tool : "";
  const char* path = getenv("PATH");
  std::stringstream folders(path ? path : "/usr/bin:/bin");
  std::string folder;
  while (std::getline(folders, folder, ':')) {
    const std::string candidate = (folder.empty() ? "." : folder) + "/" + tool;
    struct stat info {};
    if (stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

std::vector<std::string> GdbArguments(const std::string& tool_path, pid_t pid) {
  return {tool_path, "-batch", "-nx",
          // A DEBUGINFOD_URLS in the environment would make gdb download
          // symbols mid-capture; python pretty printers cost seconds.
          "-iex", "set debuginfod enabled off", "-iex", "set auto-load python-scripts off", "-p",
          std::to_string(pid), "-ex", "set pagination off", "-ex", "set width 0", "-ex",
          "thread apply all bt", "-ex", "set print frame-arguments none", "-ex",
          "set print address off", "-ex", std::string("echo \\n") + kTrimmedMarker + "\\n", "-ex",
          "thread apply all bt"};
}

// Runs `argv` with stdout and stderr into one pipe; what it printed, or
// `*timed_out` when it was killed at `deadline`.
std::string RunBounded(const std::vector<std::string>& argv, Clock::time_point deadline,
                       bool* timed_out, std::string* spawn_error) {
  std::vector<char*> words;
  for (const std::string& word : argv) words.push_back(const_cast<char*>(word.c_str()));
  words.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    *spawn_error = std::string("cannot create a pipe: ") + strerror(errno);
    return "";
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t child = fork();
  if (child == 0) {
    // Async-signal-safe calls only: the launcher has threads.
    setpgid(0, 0);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    ResetSignalsInChild();
    execv(words[0], words.data());
    _exit(127);
  }
  const int fork_error = errno;
  if (null_fd >= 0) close(null_fd);
  close(fds[1]);
  if (child < 0) {
    close(fds[0]);
    *spawn_error = std::string("fork failed: ") + strerror(fork_error);
    return "";
  }
  setpgid(child, child);
  std::string output;
  char buffer[16384];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      *timed_out = true;
      break;
    }
    pollfd entry{fds[0], POLLIN, 0};
    const int ready = poll(&entry, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t got = read(fds[0], buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    output.append(buffer, static_cast<size_t>(got));
  }
  close(fds[0]);
  // Killed with its group, gdb's tracee is detached by the kernel.
  if (*timed_out) kill(-child, SIGKILL);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (*timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 127 || !output.empty()) {
    return output;
  }
  *spawn_error = "exec failed";
  return output;
}

// Why gdb printed no thread: its own words where it said why.
std::string AttachFailure(const std::string& output) {
  std::stringstream lines(output);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (line.find("ptrace:") != std::string::npos ||
        line.find("Could not attach") != std::string::npos ||
        line.find("No such process") != std::string::npos) {
      return line;
    }
    if (!line.empty() && line.find(kTrimmedMarker) == std::string::npos) last = line;
  }
  return last.empty() ? "it printed nothing" : last;
}

bool StartsWith(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// A frame whose source line is the program's or ours: an absolute path
// outside /usr (glibc's frames name relative paths, libstdc++'s /usr/include).
bool InProgramSource(const std::string& frame) {
  const size_t at = frame.rfind(" at /");
  return at != std::string::npos && frame.compare(at + 4, 5, "/usr/") != 0;
}

// "#2  ns::Wait (a=..., b=...) at f.cc:3" -> "#2  ns::Wait at f.cc:3": the
// argument list is the parenthesised group before the location.
std::string WithoutArguments(const std::string& frame) {
  size_t location = frame.rfind(" at ");
  if (location == std::string::npos) location = frame.rfind(" from ");
  if (location == std::string::npos) location = frame.size();
  if (location < 2 || frame[location - 1] != ')') return frame;
  int depth = 0;
  for (size_t at = location; at-- > 0;) {
    if (frame[at] == ')') ++depth;
    if (frame[at] == '(' && --depth == 0) {
      if (at == 0 || frame[at - 1] != ' ') return frame;
      return frame.substr(0, at - 1) + frame.substr(location);
    }
  }
  return frame;
}

}  // namespace

StackCaptureOptions StackCaptureOptions::FromEnvironment() {
  StackCaptureOptions options;
  const char* tool = getenv("INFINI_RUN_STACK_TOOL");
  if (tool && *tool) options.tool = tool;
  return options;
}

StackCapture CaptureStacks(pid_t pid, const StackCaptureOptions& options) {
  const Clock::time_point start = Clock::now();
  StackCapture capture;
  auto finish = [&]() {
    capture.took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    return capture;
  };
  const std::string tool_path = FindTool(options.tool);
  if (tool_path.empty()) {
    capture.failure = "'" + OneLine(options.tool) + "' " +
                      (options.tool.find('/') == std::string::npos ? "not found in PATH"
                                                                   : "is not an executable") +
                      " (install gdb, or name one with INFINI_RUN_STACK_TOOL)";
    return finish();
  }
  bool timed_out = false;
  std::string spawn_error;
  const std::string output =
      RunBounded(GdbArguments(tool_path, pid), start + options.bound, &timed_out, &spawn_error);
  if (!spawn_error.empty()) {
    capture.failure = tool_path + ": " + spawn_error;
    return finish();
  }
  if (timed_out) {
    capture.failure = tool_path + " did not finish within " +
                      std::to_string(options.bound.count()) + " ms; killed";
    capture.whole = output;
    return finish();
  }
  const size_t marker = output.find(kTrimmedMarker);
  const std::string backtraces =
      marker == std::string::npos ? "" : output.substr(marker + sizeof(kTrimmedMarker));
  capture.whole = output.substr(0, marker);
  if (!StartsWith(backtraces, "\nThread ") && !StartsWith(backtraces, "Thread ") &&
      backtraces.find("\nThread ") == std::string::npos) {
    capture.failure = tool_path + " could not read pid " + std::to_string(pid) + ": " +
                      OneLine(AttachFailure(output));
    return finish();
  }
  capture.captured = true;
  capture.trimmed = TrimStacks(backtraces);
  return finish();
}

std::vector<StackCapture> CaptureStacksAtOnce(const std::vector<pid_t>& pids,
                                              const StackCaptureOptions& options) {
  std::vector<StackCapture> captures(pids.size());
  auto read = [&](size_t k) { captures[k] = CaptureStacks(pids[k], options); };
  std::vector<std::thread> readers;
  size_t started = 0;
  try {
    for (; started < pids.size(); ++started) readers.emplace_back(read, started);
  } catch (const std::system_error&) {
    for (size_t k = started; k < pids.size(); ++k) read(k);  // no thread: one after another
  }
  for (std::thread& reader : readers) reader.join();
  return captures;
}

std::string TrimStacks(const std::string& backtraces, int frames_per_thread) {
  std::ostringstream text;
  std::stringstream lines(backtraces);
  std::string line;
  std::vector<std::string> chosen;  // this thread's frames worth showing
  int frames = 0;
  bool past_main = false;
  auto end_thread = [&]() {
    // Too many: the innermost (where it waits) and the outermost (who
    // called), the middle (library internals, mostly) left out.
    const size_t limit = static_cast<size_t>(std::max(frames_per_thread, 2));
    const size_t inner = chosen.size() > limit ? limit / 2 : chosen.size();
    for (size_t k = 0; k < chosen.size(); ++k) {
      if (k == inner && chosen.size() > limit) {
        text << "    ...\n";
        k = chosen.size() - (limit - inner);
      }
      text << "    " << chosen[k] << "\n";
    }
    const int left_out = frames - static_cast<int>(std::min(chosen.size(), limit));
    if (left_out > 0) {
      text << "    (" << left_out << " frame" << (left_out == 1 ? "" : "s")
           << " outside the program's sources or past the limit left out)\n";
    }
    chosen.clear();
    frames = 0;
    past_main = false;
  };
  while (std::getline(lines, line)) {
    if (StartsWith(line, "Thread ")) {
      end_thread();
      text << "  " << line << "\n";
    } else if (StartsWith(line, "#")) {
      ++frames;
      if (!past_main && (StartsWith(line, "#0 ") || InProgramSource(line))) {
        chosen.push_back(WithoutArguments(line));
        past_main = chosen.back().find(" main ") != std::string::npos;
      }
    }
  }
  end_thread();
  return text.str();
}

std::string AppendStacksToLog(const std::string& rank_folder, const std::string& header,
                              const std::string& text, std::string* why) {
  const std::string path = rank_folder + "/stacks.log";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = "cannot write " + path + ": " + strerror(errno);
    return "";
  }
  const std::string block =
      header + "\n" + text + (text.empty() || text.back() == '\n' ? "" : "\n");
  for (size_t done = 0; done < block.size();) {
    const ssize_t wrote = write(fd, block.data() + done, block.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) break;  // a full disk: the log loses the stacks, the summary has them
    done += static_cast<size_t>(wrote);
  }
  close(fd);
  return path;
}

}  // namespace infini::launch
