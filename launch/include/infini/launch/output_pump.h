// Copies a rank's stdout and stderr from its pipes to the console (each line
// prefixed "[rankN]:", queued whole, never blocking: console.h) and to its log files, and remembers
// the last lines for the failure summary.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>

namespace infini::launch {

struct RankOutputOptions {
  int global_rank = 0;
  bool stdout_to_console = true;
  bool stderr_to_console = true;
  // Open log files (RankOutput closes them); -1: none.
  int stdout_log_fd = -1;
  int stderr_log_fd = -1;
  size_t tail_lines = 10;
  // Called with each whole line (no prefix) as it is copied; may be empty.
  std::function<void(const std::string&)> on_line;
};

class RankOutput {
 public:
  // Takes ownership of the log files.
  explicit RankOutput(const RankOutputOptions& options);
  ~RankOutput();
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;

  enum Stream { kStdout = 0, kStderr = 1 };

  // Reads what is available on `fd` (non-blocking) as `stream`. Returns false
  // at end of file.
  bool Drain(Stream stream, int fd);
  // Writes out a last line that had no newline.
  void FlushPartialLines();
  const std::deque<std::string>& tail() const { return tail_; }

 private:
  void EmitLine(Stream stream, const std::string& line);

  RankOutputOptions options_;
  std::string prefix_;
  std::string pending_[2];
  int log_fd_[2] = {-1, -1};
  std::deque<std::string> tail_;
};

// Writes all of `data` to the file `fd`, retrying on EINTR and short writes.
void WriteFully(int fd, const char* data, size_t length);

}  // namespace infini::launch
