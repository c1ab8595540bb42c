#include "infini/launch/proc_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace infini::launch {
namespace {

// read(2) that retries an interrupted call.
ssize_t ReadSome(int fd, char* buffer, size_t size) {
  ssize_t got;
  do {
    got = read(fd, buffer, size);
  } while (got < 0 && errno == EINTR);
  return got;
}

// "/proc/PID/NAME" into `path`, without allocating; false if it does not fit.
bool FormatProcPath(pid_t pid, const char* name, char* path, size_t capacity) {
  char digits[16];
  size_t count = 0;
  for (unsigned long value = static_cast<unsigned long>(pid); count == 0 || value != 0;
       value /= 10) {
    digits[count++] = static_cast<char>('0' + value % 10);
  }
  size_t length = 0;
  auto append = [&](char c) {
    if (length + 1 >= capacity) return false;
    path[length++] = c;
    return true;
  };
  for (const char* c = "/proc/"; *c; ++c) {
    if (!append(*c)) return false;
  }
  while (count > 0) {
    if (!append(digits[--count])) return false;
  }
  if (!append('/')) return false;
  for (const char* c = name; *c; ++c) {
    if (!append(*c)) return false;
  }
  path[length] = '\0';
  return true;
}

}  // namespace

std::string ReadUntilEnd(int fd) {
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t got = ReadSome(fd, buffer, sizeof(buffer));
    if (got <= 0) return text;
    text.append(buffer, static_cast<size_t>(got));
  }
}

std::string ReadProcFile(pid_t pid, const char* name) {
  char path[64];
  if (pid <= 0 || !FormatProcPath(pid, name, path, sizeof(path))) return "";
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text = ReadUntilEnd(fd);
  close(fd);
  return text;
}

pid_t ParentOf(pid_t pid) {
  char path[64];
  if (pid <= 0 || !FormatProcPath(pid, "stat", path, sizeof(path))) return -1;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  // "PID (COMM) S PPID ...": COMM may hold ')' and spaces, so the last ')'
  // ends it; 512 bytes reach past PPID for any COMM (at most 16 bytes).
  char text[512];
  const ssize_t got = ReadSome(fd, text, sizeof(text) - 1);
  close(fd);
  if (got <= 0) return -1;
  const char* close_paren = nullptr;
  for (ssize_t i = 0; i < got; ++i) {
    if (text[i] == ')') close_paren = text + i;
  }
  if (close_paren == nullptr || close_paren + 4 >= text + got) return -1;
  long parent = 0;
  for (const char* c = close_paren + 4; c < text + got && *c >= '0' && *c <= '9'; ++c) {
    parent = parent * 10 + (*c - '0');
  }
  return static_cast<pid_t>(parent);
}

pid_t InnermostPidOf(pid_t pid) {
  const std::string status = ReadProcFile(pid, "status");
  const size_t line = status.find("\nNSpid:");
  if (line == std::string::npos) return status.empty() ? -1 : pid;
  const size_t end = status.find('\n', line + 1);
  const std::string fields = status.substr(line + 7, end - line - 7);
  const size_t last = fields.find_last_of(" \t");
  return static_cast<pid_t>(std::atol(fields.c_str() + (last == std::string::npos ? 0 : last + 1)));
}

}  // namespace infini::launch
