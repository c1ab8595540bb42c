// infiniCclProfiler_v1 of the gloo plugin: one callback, set by the host.
#include "profiler.h"

#include <atomic>
#include <chrono>
#include <exception>

#include "infini/ccl/plugin_profiler_v1.h"

namespace infini::gloo_backend {
namespace {

struct Sink {
  infiniCclProfilerCallback_v1_t callback;
  void* context;
};
std::atomic<const Sink*> g_sink{nullptr};  // a set sink is never freed: a report may hold it

int64_t RealtimeNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

infiniCclResult_t SetCallback(infiniCclProfilerCallback_v1_t callback, void* context) {
  g_sink.store(callback != nullptr ? new Sink{callback, context} : nullptr);
  return infiniCclSuccess;
}

}  // namespace

ReportedCollective::ReportedCollective(const Communicator& comm, const char* name,
                                       const char* algorithm, uint64_t bytes) noexcept {
  if (g_sink.load(std::memory_order_relaxed) == nullptr) [[likely]]
    return;
  comm_ = &comm;
  name_ = name;
  algorithm_ = algorithm;
  bytes_ = bytes;
  start_ns_ = RealtimeNs();
}

ReportedCollective::~ReportedCollective() {
  const Sink* sink = g_sink.load(std::memory_order_acquire);
  // A collective that threw did not run its algorithm to the end.
  if (comm_ == nullptr || sink == nullptr || std::uncaught_exceptions() > 0) return;
  infiniCclProfilerEvent_v1_t event{};
  event.struct_size = sizeof event;
  event.name = name_;
  event.algorithm = algorithm_;
  event.protocol = nullptr;
  event.channels = -1;
  event.bytes = bytes_;
  event.start_ns = start_ns_;
  event.end_ns = RealtimeNs();
  event.comm = ToHandle(const_cast<Communicator*>(comm_));
  event.seq = INFINI_CCL_PROFILER_SEQ_HOST;  // one plugin call per host call: the host's number
  sink->callback(sink->context, &event);
}

}  // namespace infini::gloo_backend

INFINI_CCL_PLUGIN_EXPORT const infiniCclProfiler_v1_t infiniCclProfiler_v1 = {
    .struct_size = sizeof(infiniCclProfiler_v1_t),
    .version = INFINI_CCL_PROFILER_VERSION_V1,
    .set_callback = &infini::gloo_backend::SetCallback,
};
