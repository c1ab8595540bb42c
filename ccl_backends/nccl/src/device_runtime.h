// The plugin's device runtime on the CUDA runtime API. Streams and events
// cross the ABI as cudaStream_t / cudaEvent_t; NULL is the legacy default
// stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string_view>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::nccl {

inline cudaStream_t ToCuda(infiniCclStream_t stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}
inline cudaEvent_t ToCuda(infiniCclEvent_t event) { return reinterpret_cast<cudaEvent_t>(event); }

// Fails with "<call>: no CUDA device is visible (CUDA_VISIBLE_DEVICES=...;
// <why>)" when this process sees no device, so that calls needing one explain
// instead of crashing. Cheap after the first call.
infiniCclResult_t RequireDevice(std::string_view call);

// Makes `device` current for the calling thread until the guard is gone.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
};

infiniCclResult_t GetDeviceCount(int* count);
infiniCclResult_t SetDevice(int device);
infiniCclResult_t GetDevice(int* device);
infiniCclResult_t MemAlloc(void** ptr, size_t bytes);
infiniCclResult_t MemFree(void* ptr);
infiniCclResult_t HostRegister(void* ptr, size_t bytes);
infiniCclResult_t HostUnregister(void* ptr);
infiniCclResult_t HostFlagCreate(uint32_t** flag);
infiniCclResult_t HostFlagDestroy(uint32_t* flag);
infiniCclResult_t StreamWaitHostFlag(infiniCclStream_t stream, const uint32_t* flag,
                                     uint32_t value);
infiniCclResult_t StreamWriteHostFlag(infiniCclStream_t stream, uint32_t* flag, uint32_t value);
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

}  // namespace infini::ccl::nccl
