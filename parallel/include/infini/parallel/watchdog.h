// The process's watchdog as a program sees it (parallel/src/watchdog.h is
// the monitor itself). Every operation of a process group is watched: one
// that does not finish within INFINI_CCL_TIMEOUT_S, or a communicator's
// asynchronous error, ends the process with kWatchdogExitCode after one line
// on stderr naming the operation, its bytes, the group, the sequence number
// and the rank (docs/parallel.md, "Watchdog").
#pragma once

namespace infini::parallel {

// The exit status of a process ended by the watchdog (the convention of
// timeout(1): "it took too long").
inline constexpr int kWatchdogExitCode = 124;

}  // namespace infini::parallel
