// Turns SIGCHLD, SIGINT, SIGTERM, SIGHUP and SIGUSR2 into bytes on a pipe
// (the self-pipe trick), so the supervisor's poll loop sees them.
#pragma once

#include <vector>

namespace infini::launch {

class SignalWatcher {
 public:
  // Installs the handlers (once per process) and ignores SIGPIPE.
  static void Install();
  // Readable when a signal arrived.
  static int fd();
  // Returns the signals that arrived since the last call, in order.
  static std::vector<int> TakeSignals();
  // Restores default dispositions; called in a child between fork and exec.
  static void ResetInChild();
  // SIGINT, SIGTERM, SIGHUP: the launcher stops. Others are requests
  // (SIGUSR2: print every rank's stacks) or SIGCHLD.
  static bool StopsTheLauncher(int signal_number);
};

// "SIGTERM" for 15, "signal 77" for unknown numbers.
const char* SignalName(int signal_number, char (&buffer)[32]);

}  // namespace infini::launch
