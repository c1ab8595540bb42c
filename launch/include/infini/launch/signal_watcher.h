// Turns SIGCHLD, SIGINT, SIGTERM and SIGHUP into bytes on a pipe (the
// self-pipe trick), so the supervisor's poll loop sees them.
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
};

// "SIGTERM" for 15, "signal 77" for unknown numbers.
const char* SignalName(int signal_number, char (&buffer)[32]);

}  // namespace infini::launch
