// gloo's TCP transport writes with writev(2), which raises SIGPIPE when the
// peer is gone, and SIGPIPE's default action kills the process: a dead peer
// would take every other rank down instead of failing their collectives
// with infiniCclRemoteError. (Python ignores SIGPIPE, which is why this does
// not show under PyTorch.) Changing the process-wide disposition would
// change how the user's program reacts to a closed stdout, so instead the
// calling thread blocks SIGPIPE while it is inside the plugin, and the
// gloo event-loop thread inherits the blocked mask when it is created.
#pragma once

#include <signal.h>

namespace infini::gloo_backend {

class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &previous_);
  }
  ~ScopedSigpipeBlock() {
    if (sigismember(&previous_, SIGPIPE)) return;  // the caller blocks it already
    // A SIGPIPE raised meanwhile is pending for this thread: consume it, so
    // restoring the mask does not deliver it.
    sigset_t pending;
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
      sigset_t pipe_only;
      sigemptyset(&pipe_only);
      sigaddset(&pipe_only, SIGPIPE);
      const timespec no_wait{0, 0};
      sigtimedwait(&pipe_only, nullptr, &no_wait);
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace infini::gloo_backend
