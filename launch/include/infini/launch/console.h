// The launcher's stdout and stderr, written without ever blocking: a reader
// that stops reading must not stop supervision. Lines wait in a bounded queue;
// when it is full, new lines are dropped and counted (said once, and the
// count at exit).
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <vector>

namespace infini::launch {

class Console {
 public:
  enum Stream { kStdout = 0, kStderr = 1 };
  static constexpr size_t kDefaultQueueBytes = size_t{8} << 20;

  // The process-wide console on file descriptors 1 and 2.
  static Console& Get();

  // Queues one whole line (with its newline); never blocks.
  void WriteLine(Stream stream, const std::string& line);
  // Entries (fd, POLLOUT) for the streams with queued bytes.
  void AddPollEntries(std::vector<pollfd>* entries) const;
  // Writes what the streams accept now.
  void WriteQueued();
  // At exit: writes the queue for up to `bound`, then reports dropped lines.
  void Flush(std::chrono::milliseconds bound);
  size_t dropped_lines() const { return dropped_lines_; }

  // For tests: a console on other descriptors with a small queue.
  Console(int stdout_fd, int stderr_fd, size_t queue_bytes);
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;
  ~Console();

 private:
  struct Sink {
    int fd = -1;
    bool owned = false;      // a non-blocking reopening of the inherited fd
    bool may_block = false;  // a regular file: write() does not wait on a reader
    std::deque<std::string> queue;
    size_t queued_bytes = 0;
    size_t written_of_front = 0;
    bool broken = false;  // the reader is gone (EPIPE): discard
  };
  void OpenSink(int fd, Sink* sink);
  bool WriteSome(Sink* sink);  // false: would block
  void Enqueue(Sink* sink, const std::string& line);

  Sink sinks_[2];
  size_t queue_bytes_;
  size_t dropped_lines_ = 0;
  bool said_dropping_ = false;
};

// "infini_run: <line>" on stderr through the console.
void Say(const std::string& line);

}  // namespace infini::launch
