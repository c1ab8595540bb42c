// The host's side of plugin_profiler_v1.h: the callback a plugin reports
// through, and its connection when the backend loads.
#include "trace_profiler.h"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "infini/ccl/plugin_profiler_v1.h"
#include "infini/ccl/trace.h"
#include "trace_recorder.h"

namespace infini::ccl::internal {
namespace {

// A field is read only when the plugin's event is long enough to hold it.
#define EVENT_FIELD(field, fallback)                                                               \
  (event->struct_size >= INFINI_CCL_STRUCT_SIZE(infiniCclProfilerEvent_v1_t, field) ? event->field \
                                                                                    : (fallback))

extern "C" void OnPluginEvent(void* /*context*/, const infiniCclProfilerEvent_v1_t* event) {
  if (event == nullptr || !trace::Enabled()) return;
  const char* name = EVENT_FIELD(name, static_cast<const char*>(nullptr));
  const uint64_t seq = EVENT_FIELD(seq, uint64_t{INFINI_CCL_PROFILER_SEQ_HOST});
  PluginSpan span{};
  span.handle = EVENT_FIELD(comm, static_cast<infiniCclComm_t>(nullptr));
  span.name = name != nullptr ? name : "plugin_event";
  span.algorithm = EVENT_FIELD(algorithm, static_cast<const char*>(nullptr));
  span.protocol = EVENT_FIELD(protocol, static_cast<const char*>(nullptr));
  span.channels = EVENT_FIELD(channels, int32_t{-1});
  span.bytes = EVENT_FIELD(bytes, uint64_t{0});
  span.seq =
      seq == INFINI_CCL_PROFILER_SEQ_HOST || seq > INT64_MAX ? -1 : static_cast<int64_t>(seq);
  span.begin_ns = EVENT_FIELD(start_ns, int64_t{0});
  span.end_ns = EVENT_FIELD(end_ns, span.begin_ns);
  RecordPluginSpan(span);
}

#undef EVENT_FIELD

void Warn(const std::string& library_path, const std::string& why) {
  const std::string line = "infini_ccl: " + library_path + ": " + INFINI_CCL_PROFILER_SYMBOL_V1 +
                           " " + why + "; the trace goes on without the plugin's events\n";
  (void)!write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace

void ConnectProfiler(const void* profiler_v1, const std::string& library_path) {
  if (profiler_v1 == nullptr || !trace::Enabled()) return;
  const auto* profiler = static_cast<const infiniCclProfiler_v1_t*>(profiler_v1);
  if (profiler->struct_size < INFINI_CCL_STRUCT_SIZE(infiniCclProfiler_v1_t, set_callback) ||
      profiler->version != INFINI_CCL_PROFILER_VERSION_V1 || profiler->set_callback == nullptr) {
    return Warn(library_path,
                "has struct_size " + std::to_string(profiler->struct_size) + " and version " +
                    std::to_string(profiler->version) + ", expected version " +
                    std::to_string(INFINI_CCL_PROFILER_VERSION_V1) + " with a set_callback entry");
  }
  if (const infiniCclResult_t result = profiler->set_callback(&OnPluginEvent, nullptr);
      result != infiniCclSuccess) {
    Warn(library_path, "refused the host's callback (result " + std::to_string(result) + ")");
  }
}

}  // namespace infini::ccl::internal
