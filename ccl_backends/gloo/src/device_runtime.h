// The ABI's device runtime, on the host. The gloo backend's one "device" is
// the host (kDLCPU): get_device_count reports 1, set_device accepts any
// index >= 0 (ranks of one machine share the host), memory is aligned host
// memory, and every copy and collective is synchronous, so streams and
// events are light host objects: stream_synchronize has nothing to wait for,
// and an event records the host time when it is recorded.
#pragma once

#include "infini/ccl/plugin_abi.h"

namespace infini::gloo_backend {

infiniCclResult_t GetDeviceCount(int* count);
infiniCclResult_t SetDevice(int device);
infiniCclResult_t GetDevice(int* device);
infiniCclResult_t MemAlloc(void** ptr, size_t bytes);
infiniCclResult_t MemFree(void* ptr);
infiniCclResult_t MemcpyAsync(void* dst, const void* src, size_t bytes, infiniCclMemcpyKind_t kind,
                              infiniCclStream_t stream);
infiniCclResult_t MemsetAsync(void* ptr, int value, size_t bytes, infiniCclStream_t stream);
infiniCclResult_t StreamCreate(infiniCclStream_t* stream);
infiniCclResult_t StreamDestroy(infiniCclStream_t stream);
infiniCclResult_t StreamSynchronize(infiniCclStream_t stream);
infiniCclResult_t StreamWaitEvent(infiniCclStream_t stream, infiniCclEvent_t event);
infiniCclResult_t EventCreate(infiniCclEvent_t* event);
infiniCclResult_t EventDestroy(infiniCclEvent_t event);
infiniCclResult_t EventRecord(infiniCclEvent_t event, infiniCclStream_t stream);
infiniCclResult_t EventQuery(infiniCclEvent_t event, int* done);
infiniCclResult_t EventSynchronize(infiniCclEvent_t event);
infiniCclResult_t EventElapsedMs(infiniCclEvent_t start, infiniCclEvent_t end, float* ms);

}  // namespace infini::gloo_backend
