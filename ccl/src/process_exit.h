// Whether the process has begun exit(): an atexit hook, registered when the
// first backend is loaded, says so. It runs before the destructors of static
// objects constructed before that load, and the vendor runtime may already be
// gone by then, so RAII types stop calling the plugin to free what they hold
// (ccl.h, "At process exit").
#pragma once

#include <atomic>
#include <cstdlib>

namespace infini::ccl::internal {

// Constant-initialized and trivially destructible: usable at any point of
// the process's end.
inline std::atomic<bool> g_process_exiting{false};

inline bool ProcessIsExiting() { return g_process_exiting.load(std::memory_order_acquire); }

// Registers the hook, once per process; call before the plugin is opened,
// so that what the plugin and its vendor library register runs before it.
inline void WatchProcessExit() {
  static const bool registered = [] {
    return std::atexit([] { g_process_exiting.store(true, std::memory_order_release); }) == 0;
  }();
  (void)registered;
}

}  // namespace infini::ccl::internal
