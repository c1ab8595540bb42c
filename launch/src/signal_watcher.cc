#include "infini/launch/signal_watcher.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace infini::launch {
namespace {

int g_pipe[2] = {-1, -1};
constexpr int kWatchedSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR2};

void OnSignal(int signal_number) {
  int saved_errno = errno;
  unsigned char byte = static_cast<unsigned char>(signal_number);
  [[maybe_unused]] ssize_t ignored = write(g_pipe[1], &byte, 1);
  errno = saved_errno;
}

}  // namespace

void SignalWatcher::Install() {
  if (g_pipe[0] >= 0) return;
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    perror("infini_run: pipe");
    _exit(1);
  }
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // SIGCHLD also when a rank stops
  for (int signal_number : kWatchedSignals) sigaction(signal_number, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int SignalWatcher::fd() { return g_pipe[0]; }

std::vector<int> SignalWatcher::TakeSignals() {
  std::vector<int> signals;
  unsigned char buffer[64];
  ssize_t got;
  while ((got = read(g_pipe[0], buffer, sizeof(buffer))) > 0) {
    for (ssize_t i = 0; i < got; ++i) signals.push_back(buffer[i]);
  }
  return signals;
}

void SignalWatcher::ResetInChild() {
  // Only async-signal-safe calls: this runs between fork and exec.
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  for (int signal_number : kWatchedSignals) sigaction(signal_number, &action, nullptr);
  sigaction(SIGPIPE, &action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

bool SignalWatcher::StopsTheLauncher(int signal_number) {
  return signal_number == SIGINT || signal_number == SIGTERM || signal_number == SIGHUP;
}

const char* SignalName(int signal_number, char (&buffer)[32]) {
  const char* abbreviation = sigabbrev_np(signal_number);
  if (abbreviation) {
    snprintf(buffer, sizeof(buffer), "SIG%s", abbreviation);
  } else {
    snprintf(buffer, sizeof(buffer), "signal %d", signal_number);
  }
  return buffer;
}

}  // namespace infini::launch
