// The trace's recorder inside ccl/ (docs/tracing.md): a bounded ring per
// global rank that calls push into, and one background thread that drains
// the rings into INFINI_CCL_TRACE_DIR/rank<R>.jsonl and keeps the metrics.
// A call never waits for the disk: only for a short lock on its rank's ring.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "infini/ccl/collectives.h"
#include "infini/ccl/trace.h"
#include "trace_device.h"

namespace infini::ccl::internal {

// One recorded span, plain data: names are static text or interned.
struct TraceEvent {
  trace::Category category = trace::Category::kCcl;
  int8_t collective = -1;  // a Collective for kCcl spans, else -1
  const char* name = "";
  const std::string* group = nullptr;  // interned; nullptr: unnamed
  int64_t seq = 0;
  DLDataType dtype{};
  int64_t count = 0;
  uint64_t bytes = 0;
  int world = 0;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  // kPlugin spans: what the backend said it chose (interned; nullptr: not said).
  const std::string* algorithm = nullptr;
  const std::string* protocol = nullptr;
  int channels = -1;  // -1: not said
};

// What a Communicator call's span knows before the recorder adds the
// communicator's label and number.
struct CallSpan {
  Collective collective;
  const void* handle;
  DLDataType dtype;
  size_t count;     // the plugin entry's count
  size_t elements;  // nccl-tests' size S, in elements (the bytes, once typed)
  int world;
  int communicator_rank;
  int64_t begin_ns;
};

// Records a Communicator call (the label of its handle, the next number);
// with `device`, its device span too, once the recorder has read it.
void RecordCall(const CallSpan& span, int64_t end_ns, std::unique_ptr<DeviceSample> device);
// An event a backend reported (trace_profiler.cc) about the communicator
// `handle`: it counts for that communicator's rank and group. `name`,
// `algorithm` and `protocol` (nullptr: not said) are interned; seq < 0: the
// number of the communicator's call in progress.
struct PluginSpan {
  const void* handle;
  const char* name;
  const char* algorithm;
  const char* protocol;
  int channels;
  uint64_t bytes;
  int64_t seq;
  int64_t begin_ns;
  int64_t end_ns;
};
void RecordPluginSpan(const PluginSpan& span);
// The handle's communicator is gone: a new one may reuse the address.
void ForgetCommunicator(const void* handle);

// Communicator's hook: when tracing is off, one relaxed load and a branch.
class TraceScope {
 public:
  // `where` is called only when tracing is on: it says where the call
  // enqueues, for the device span.
  template <typename Where>
  TraceScope(Collective collective, const void* handle, DLDataType dtype, size_t count,
             size_t elements, int world, int communicator_rank, Where where) noexcept {
    if (!trace::Enabled()) [[likely]]
      return;
    active_ = true;
    stream_ = where();
    span_ = {collective, handle, dtype, count, elements, world, communicator_rank, trace::NowNs()};
    device_ = StartDeviceSample(stream_);
  }
  ~TraceScope() {
    if (!active_) [[likely]]
      return;
    // A call that threw enqueued nothing to time.
    if (device_ != nullptr &&
        (std::uncaught_exceptions() > 0 || !EndDeviceSample(*device_, stream_.stream))) {
      ReleaseDeviceSample(*device_);
      device_.reset();
    }
    RecordCall(span_, trace::NowNs(), std::move(device_));
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  bool active_ = false;
  CallSpan span_;  // set only when active_: nothing to do when off
  TraceStream stream_;
  std::unique_ptr<DeviceSample> device_;
};

}  // namespace infini::ccl::internal
