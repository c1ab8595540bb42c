#include "device_runtime.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "errors.h"

// The opaque handle types of the ABI, defined here as host objects.
struct infiniCclStream {
  int unused = 0;  // work is synchronous: nothing to track
};
struct infiniCclEvent {
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
};

namespace infini::gloo_backend {
namespace {

// Cache-line alignment, enough for any element type and for vector loads.
constexpr size_t kAlignment = 64;
thread_local int current_device = 0;

}  // namespace

infiniCclResult_t GetDeviceCount(int* count) {
  return Guarded("get_device_count", [&] {
    RequireArgument(count != nullptr, "count is NULL");
    *count = 1;
    return infiniCclSuccess;
  });
}

infiniCclResult_t SetDevice(int device) {
  return Guarded("set_device", [&] {
    RequireArgument(device >= 0, "device index " + std::to_string(device) +
                                     " is negative; expected 0 or more (all map to the host)");
    current_device = device;
    return infiniCclSuccess;
  });
}

infiniCclResult_t GetDevice(int* device) {
  return Guarded("get_device", [&] {
    RequireArgument(device != nullptr, "device is NULL");
    *device = current_device;
    return infiniCclSuccess;
  });
}

infiniCclResult_t MemAlloc(void** ptr, size_t bytes) {
  return Guarded("mem_alloc", [&] {
    RequireArgument(ptr != nullptr, "ptr is NULL");
    *ptr = nullptr;
    if (bytes == 0) return infiniCclSuccess;
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    *ptr = std::aligned_alloc(kAlignment, rounded);
    if (*ptr == nullptr) {
      return Fail(infiniCclSystemError,
                  "mem_alloc: out of host memory allocating " + std::to_string(bytes) + " bytes");
    }
    return infiniCclSuccess;
  });
}

infiniCclResult_t MemFree(void* ptr) {
  std::free(ptr);
  return infiniCclSuccess;
}

infiniCclResult_t MemcpyAsync(void* dst, const void* src, size_t bytes, infiniCclMemcpyKind_t kind,
                              infiniCclStream_t /*stream*/) {
  return Guarded("memcpy_async", [&] {
    RequireArgument(kind >= infiniCclMemcpyHostToHost && kind <= infiniCclMemcpyDeviceToDevice,
                    "memcpy kind " + std::to_string(static_cast<int>(kind)) + " is unknown");
    if (bytes == 0) return infiniCclSuccess;
    RequireArgument(dst != nullptr && src != nullptr, "dst or src is NULL");
    std::memmove(dst, src, bytes);
    return infiniCclSuccess;
  });
}

infiniCclResult_t MemsetAsync(void* ptr, int value, size_t bytes, infiniCclStream_t /*stream*/) {
  return Guarded("memset_async", [&] {
    if (bytes == 0) return infiniCclSuccess;
    RequireArgument(ptr != nullptr, "ptr is NULL");
    std::memset(ptr, value, bytes);
    return infiniCclSuccess;
  });
}

infiniCclResult_t StreamCreate(infiniCclStream_t* stream) {
  return Guarded("stream_create", [&] {
    RequireArgument(stream != nullptr, "stream is NULL");
    *stream = new infiniCclStream;
    return infiniCclSuccess;
  });
}

infiniCclResult_t StreamDestroy(infiniCclStream_t stream) {
  delete stream;
  return infiniCclSuccess;
}

infiniCclResult_t StreamSynchronize(infiniCclStream_t /*stream*/) { return infiniCclSuccess; }

infiniCclResult_t StreamWaitEvent(infiniCclStream_t /*stream*/, infiniCclEvent_t event) {
  return Guarded("stream_wait_event", [&] {
    RequireArgument(event != nullptr, "event is NULL");
    return infiniCclSuccess;
  });
}

infiniCclResult_t EventCreate(infiniCclEvent_t* event) {
  return Guarded("event_create", [&] {
    RequireArgument(event != nullptr, "event is NULL");
    *event = new infiniCclEvent;
    return infiniCclSuccess;
  });
}

infiniCclResult_t EventDestroy(infiniCclEvent_t event) {
  delete event;
  return infiniCclSuccess;
}

infiniCclResult_t EventRecord(infiniCclEvent_t event, infiniCclStream_t /*stream*/) {
  return Guarded("event_record", [&] {
    RequireArgument(event != nullptr, "event is NULL");
    event->recorded = true;
    event->time = std::chrono::steady_clock::now();
    return infiniCclSuccess;
  });
}

infiniCclResult_t EventQuery(infiniCclEvent_t event, int* done) {
  return Guarded("event_query", [&] {
    RequireArgument(event != nullptr && done != nullptr, "event or done is NULL");
    *done = 1;  // work before a record has always finished
    return infiniCclSuccess;
  });
}

infiniCclResult_t EventSynchronize(infiniCclEvent_t event) {
  return Guarded("event_synchronize", [&] {
    RequireArgument(event != nullptr, "event is NULL");
    return infiniCclSuccess;
  });
}

infiniCclResult_t EventElapsedMs(infiniCclEvent_t start, infiniCclEvent_t end, float* ms) {
  return Guarded("event_elapsed_ms", [&] {
    RequireArgument(start != nullptr && end != nullptr && ms != nullptr,
                    "start, end or ms is NULL");
    if (!start->recorded || !end->recorded) {
      return Fail(infiniCclInvalidUsage,
                  "event_elapsed_ms: both events must be recorded (event_record) first");
    }
    *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
    return infiniCclSuccess;
  });
}

}  // namespace infini::gloo_backend
