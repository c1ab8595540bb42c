#include "infini/launch/console.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "infini/common/one_line.h"

namespace infini::launch {

Console& Console::Get() {
  static Console console(STDOUT_FILENO, STDERR_FILENO, kDefaultQueueBytes);
  return console;
}

Console::Console(int stdout_fd, int stderr_fd, size_t queue_bytes) : queue_bytes_(queue_bytes) {
  OpenSink(stdout_fd, &sinks_[kStdout]);
  OpenSink(stderr_fd, &sinks_[kStderr]);
}

Console::~Console() {
  for (Sink& sink : sinks_) {
    if (sink.owned) close(sink.fd);
  }
}

void Console::OpenSink(int fd, Sink* sink) {
  sink->fd = fd;
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    sink->broken = true;
    return;
  }
  if (S_ISREG(info.st_mode) || S_ISBLK(info.st_mode)) {
    sink->may_block = true;  // a file never waits for a reader
    return;
  }
  // Setting O_NONBLOCK on the inherited descriptor would change it for every
  // process sharing it (the shell too); a new open of the same pipe or
  // terminal is ours alone.
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  int reopened = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (reopened >= 0) {
    sink->fd = reopened;
    sink->owned = true;
  }
  // Otherwise (a socket): every write below is poll-gated and MSG_DONTWAIT.
}

bool Console::WriteSome(Sink* sink) {
  while (!sink->queue.empty()) {
    const std::string& front = sink->queue.front();
    const char* data = front.data() + sink->written_of_front;
    const size_t left = front.size() - sink->written_of_front;
    ssize_t written = sink->owned || sink->may_block ? write(sink->fd, data, left)
                                                     : send(sink->fd, data, left, MSG_DONTWAIT);
    if (written < 0 && errno == ENOTSOCK) written = write(sink->fd, data, left);
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      sink->broken = true;  // EPIPE and the like: nobody will read it
      sink->queue.clear();
      sink->queued_bytes = 0;
      sink->written_of_front = 0;
      return true;
    }
    sink->written_of_front += static_cast<size_t>(written);
    if (sink->written_of_front == front.size()) {
      sink->queued_bytes -= front.size();
      sink->queue.pop_front();
      sink->written_of_front = 0;
    }
  }
  return true;
}

void Console::Enqueue(Sink* sink, const std::string& line) {
  sink->queue.push_back(line);
  sink->queued_bytes += line.size();
}

void Console::WriteLine(Stream stream, const std::string& line) {
  Sink& sink = sinks_[stream];
  if (sink.broken) return;
  if (sink.queued_bytes + line.size() > queue_bytes_ && !sink.queue.empty()) {
    ++dropped_lines_;
    if (!said_dropping_) {
      said_dropping_ = true;
      Sink& notice = sinks_[kStderr];
      if (!notice.broken) {
        Enqueue(&notice, std::string("infini_run: the console's ") +
                             (stream == kStdout ? "stdout" : "stderr") +
                             " is not being read; output lines are dropped (counted at exit)\n");
      }
    }
    return;
  }
  Enqueue(&sink, line);
  WriteSome(&sink);
}

void Console::AddPollEntries(std::vector<pollfd>* entries) const {
  for (const Sink& sink : sinks_) {
    if (!sink.broken && !sink.queue.empty()) entries->push_back({sink.fd, POLLOUT, 0});
  }
}

void Console::WriteQueued() {
  for (Sink& sink : sinks_) {
    if (!sink.broken) WriteSome(&sink);
  }
}

void Console::Flush(std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  bool reported = false;
  while (true) {
    if (dropped_lines_ > 0 && !reported) {
      reported = true;
      Sink& notice = sinks_[kStderr];
      if (!notice.broken) {
        Enqueue(&notice, "infini_run: " + std::to_string(dropped_lines_) +
                             " output line(s) were dropped because the console was not read\n");
      }
    }
    WriteQueued();
    std::vector<pollfd> entries;
    AddPollEntries(&entries);
    if (entries.empty()) return;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    poll(entries.data(), entries.size(), static_cast<int>(left.count()));
  }
}

void Say(const std::string& line) {
  // One line whatever the message echoes (a value holding a newline).
  Console::Get().WriteLine(Console::kStderr, "infini_run: " + OneLine(line) + "\n");
}

}  // namespace infini::launch
