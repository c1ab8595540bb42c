// A backend's own events (plugin_profiler_v1.h) into the trace: when
// tracing is on, the host gives the plugin's profiler a callback that
// records what it reports as "plugin" spans.
#pragma once

#include <string>

namespace infini::ccl::internal {

// `profiler_v1`: the library's infiniCclProfiler_v1 symbol, or nullptr.
// A table the host cannot read, or a plugin that refuses the callback, is
// one line on stderr naming `library_path`; the backend loads all the same.
void ConnectProfiler(const void* profiler_v1, const std::string& library_path);

}  // namespace infini::ccl::internal
