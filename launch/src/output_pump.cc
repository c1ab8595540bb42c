#include "infini/launch/output_pump.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "infini/launch/console.h"
#include "infini/launch/options.h"

namespace infini::launch {
namespace {

// A line longer than this is written out in pieces, so one rank that never
// prints a newline cannot grow the launcher without bound.
constexpr size_t kMaxLineBytes = 64 * 1024;

}  // namespace

void WriteFully(int fd, const char* data, size_t length) {
  while (length > 0) {
    ssize_t written = write(fd, data, length);
    if (written < 0) {
      if (errno == EINTR) continue;
      return;  // a full disk: the log loses the line, the run goes on
    }
    data += written;
    length -= static_cast<size_t>(written);
  }
}

RankOutput::RankOutput(const RankOutputOptions& options)
    : options_(options), prefix_("[rank" + std::to_string(options.global_rank) + "]:") {
  log_fd_[kStdout] = options.stdout_log_fd;
  log_fd_[kStderr] = options.stderr_log_fd;
}

RankOutput::~RankOutput() {
  for (int fd : log_fd_) {
    if (fd >= 0) close(fd);
  }
}

bool RankOutput::Drain(Stream stream, int fd) {
  char buffer[16384];
  while (true) {
    ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) return true;
    if (got <= 0) return false;
    std::string& pending = pending_[stream];
    pending.append(buffer, static_cast<size_t>(got));
    size_t start = 0;
    for (size_t newline; (newline = pending.find('\n', start)) != std::string::npos;
         start = newline + 1) {
      EmitLine(stream, pending.substr(start, newline - start));
    }
    pending.erase(0, start);
    while (pending.size() >= kMaxLineBytes) {
      EmitLine(stream, pending.substr(0, kMaxLineBytes));
      pending.erase(0, kMaxLineBytes);
    }
    if (static_cast<size_t>(got) < sizeof(buffer)) return true;
  }
}

void RankOutput::FlushPartialLines() {
  for (Stream stream : {kStdout, kStderr}) {
    if (!pending_[stream].empty()) {
      EmitLine(stream, pending_[stream]);
      pending_[stream].clear();
    }
  }
}

void RankOutput::EmitLine(Stream stream, const std::string& line) {
  std::string with_newline = line + "\n";
  if (log_fd_[stream] >= 0) WriteFully(log_fd_[stream], with_newline.data(), with_newline.size());
  bool to_console = stream == kStdout ? options_.stdout_to_console : options_.stderr_to_console;
  if (to_console) {
    // One write per line: lines of different ranks never mix.
    Console::Get().WriteLine(stream == kStdout ? Console::kStdout : Console::kStderr,
                             prefix_ + with_newline);
  }
  if (options_.tail_lines > 0) {
    tail_.push_back(prefix_ + line);
    if (tail_.size() > options_.tail_lines) tail_.pop_front();
  }
  if (options_.on_line) options_.on_line(line);
}

}  // namespace infini::launch
