// Every thread's stack of a running rank, read from outside the process by a
// debugger the launcher starts (gdb -batch -p PID), so that a rank wedged in
// a collective, in a lock or stopped by SIGSTOP can still be read. The
// launcher uses it for the stuck rank before it stops the run, and for every
// rank on SIGUSR2 (infini_run --dump_stacks).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace infini::launch {

// The debugger and how long one capture may take; a capture past the bound
// is killed, so a debugger that hangs never holds up the run's stop.
struct StackCaptureOptions {
  // A program name (looked up in PATH) or a path; INFINI_RUN_STACK_TOOL
  // overrides the default, gdb.
  std::string tool = "gdb";
  std::chrono::milliseconds bound{std::chrono::seconds(10)};

  // gdb, or $INFINI_RUN_STACK_TOOL when set.
  static StackCaptureOptions FromEnvironment();
};

struct StackCapture {
  bool captured = false;
  // What the debugger printed: every thread, every frame, with arguments.
  std::string whole;
  // For the summary and the console: per thread the frame it waits in and
  // the program's frames (TrimStacks).
  std::string trimmed;
  // Not captured: one line saying why (tool missing, attach refused, over
  // the bound), naming the tool.
  std::string failure;
  std::chrono::milliseconds took{0};
};

// Reads every thread's stack of `pid` (the pid as this process sees it).
// Never takes longer than options.bound (plus reaping a killed debugger).
StackCapture CaptureStacks(pid_t pid, const StackCaptureOptions& options);

// The same for several processes at once (a debugger each, on threads of
// their own), so that a node of many ranks pauses for about one read, not
// their sum; in the order of `pids`.
std::vector<StackCapture> CaptureStacksAtOnce(const std::vector<pid_t>& pids,
                                              const StackCaptureOptions& options);

// From gdb's `thread apply all bt` printed without addresses: per thread
// its header, frame #0 (where the thread waits) and the frames whose source
// line is an absolute path outside /usr (the program's and our code; glibc's
// frames name relative paths, libstdc++'s /usr/include), up to main,
// without their arguments; of more than `frames_per_thread` such frames the
// innermost and outermost halves ("..." between); the frames left out are
// counted on one line.
std::string TrimStacks(const std::string& backtraces, int frames_per_thread = 8);

// Appends `text` under a header line to RANK_FOLDER/stacks.log (0600, the
// folder is the rank's private log folder). Returns the file's path, or ""
// with `why` set when it cannot be written.
std::string AppendStacksToLog(const std::string& rank_folder, const std::string& header,
                              const std::string& text, std::string* why);

}  // namespace infini::launch
