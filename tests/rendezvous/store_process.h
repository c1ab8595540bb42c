// A store (or relay) in a child process, for tests that measure its memory
// and descriptors apart from the test's own, and helpers to feed it.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "infini/rendezvous/tcp_store.h"

namespace infini::rendezvous::testing {

using std::chrono::milliseconds;

// A "Vm...:" figure of this process, in KiB (VmRSS: resident now, VmHWM: its peak).
inline long OwnMemoryKib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::strtol(line.c_str() + field.size(), nullptr, 10);
  }
  return -1;
}

// Sends up to `count` bytes of `bytes` without blocking for longer than
// `patience` at a time (the server may stop reading); returns how many went.
inline size_t SendUpTo(int fd, const char* bytes, size_t count, milliseconds patience) {
  size_t sent = 0;
  while (sent < count) {
    pollfd descriptor{.fd = fd, .events = POLLOUT, .revents = 0};
    if (::poll(&descriptor, 1, static_cast<int>(patience.count())) <= 0) break;
    const ssize_t went = ::send(fd, bytes + sent, count - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (went < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      break;
    }
    sent += static_cast<size_t>(went);
  }
  return sent;
}

// A store in a child process (forked while this process has one thread), so
// that its memory and descriptors are its own. Status() asks it for its
// counters and its resident memory.
class StoreProcess {
 public:
  explicit StoreProcess(const TcpStoreServerOptions& options, size_t open_file_limit = 0) {
    int to_child[2];
    int from_child[2];
    EXPECT_EQ(::pipe(to_child), 0);
    EXPECT_EQ(::pipe(from_child), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      Serve(options, open_file_limit, to_child[0], from_child[1]);
      ::_exit(0);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    to_child_ = to_child[1];
    from_child_ = from_child[0];
    const std::map<std::string, long> started = Status();
    port_ = static_cast<uint16_t>(started.count("port") ? started.at("port") : 0);
  }
  ~StoreProcess() {
    ::close(to_child_);
    ::close(from_child_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }

  uint16_t port() const { return port_; }

  // port, connections, keys, waiters, shed, charged, stored, rss_kib, hwm_kib.
  std::map<std::string, long> Status() {
    const char command = 's';
    std::map<std::string, long> fields;
    if (::write(to_child_, &command, 1) != 1) return fields;
    std::string line;
    char byte;
    while (::read(from_child_, &byte, 1) == 1 && byte != '\n') line += byte;
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      const size_t equals = word.find('=');
      if (equals != std::string::npos)
        fields[word.substr(0, equals)] = std::stol(word.substr(equals + 1));
    }
    return fields;
  }

 private:
  static void Serve(const TcpStoreServerOptions& options, size_t open_file_limit, int commands,
                    int answers) {
    if (open_file_limit > 0) {
      rlimit limit{};
      getrlimit(RLIMIT_NOFILE, &limit);
      limit.rlim_cur = open_file_limit;
      setrlimit(RLIMIT_NOFILE, &limit);
    }
    auto server = TcpStoreServer::Start(options);
    char command;
    while (::read(commands, &command, 1) == 1) {
      char line[512];
      const int length = std::snprintf(
          line, sizeof(line),
          "port=%u connections=%zu keys=%zu waiters=%zu shed=%zu charged=%zu "
          "stored=%zu rss_kib=%ld hwm_kib=%ld\n",
          server->port(), server->num_connections(), server->num_keys(), server->num_waiters(),
          server->num_shed_connections(), server->charged_bytes(), server->stored_bytes(),
          OwnMemoryKib("VmRSS:"), OwnMemoryKib("VmHWM:"));
      if (::write(answers, line, static_cast<size_t>(length)) != length) break;
    }
  }

  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  uint16_t port_ = 0;
};

}  // namespace infini::rendezvous::testing
