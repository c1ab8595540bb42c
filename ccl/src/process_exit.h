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

// What RAII types leave at exit stays reachable here, so that a leak checker
// running after static destruction (LeakSanitizer) sees it as live, which it
// is until the OS reclaims it. Beyond the slots, handles are simply left.
inline std::atomic<const void*> g_left_at_exit[256];

inline void LeaveToProcessEnd(const void* handle) {
  if (handle == nullptr) return;
  for (auto& slot : g_left_at_exit) {
    const void* empty = nullptr;
    if (slot.compare_exchange_strong(empty, handle)) return;
  }
}

// Registers the hook, once per process; call before the plugin is opened,
// so that what the plugin and its vendor library register runs before it.
inline void WatchProcessExit() {
  static const bool registered = [] {
    return std::atexit([] { g_process_exiting.store(true, std::memory_order_release); }) == 0;
  }();
  (void)registered;
}

}  // namespace infini::ccl::internal
