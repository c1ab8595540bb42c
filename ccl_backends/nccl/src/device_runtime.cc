#include "device_runtime.h"

#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "errors.h"
#include "nccl_symbol.h"

namespace infini::ccl::nccl {
namespace {

// What this process can see. CUDA reads CUDA_VISIBLE_DEVICES once, when the
// runtime starts, so the answer never changes and is computed once.
struct Visibility {
  int device_count = 0;
  std::string why_none;  // cudaGetDeviceCount's error, when it failed
};

const Visibility& GetVisibility() {
  static const Visibility visibility = [] {
    Visibility seen;
    const cudaError_t error = cudaGetDeviceCount(&seen.device_count);
    if (error != cudaSuccess) {
      // No driver, no device, or a driver too old: all mean "zero devices".
      cudaGetLastError();
      seen.device_count = 0;
      seen.why_none = std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
    }
    return seen;
  }();
  return visibility;
}

std::string VisibleDevicesText() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  if (value == nullptr) return "<unset>";
  // append, not operator+: GCC 12 at -O3 warns falsely (-Wrestrict) on it.
  std::string text = "'";
  text.append(value).append("'");
  return text;
}

cudaMemcpyKind ToCuda(infiniCclMemcpyKind_t kind) {
  switch (kind) {
    case infiniCclMemcpyHostToHost:
      return cudaMemcpyHostToHost;
    case infiniCclMemcpyHostToDevice:
      return cudaMemcpyHostToDevice;
    case infiniCclMemcpyDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case infiniCclMemcpyDeviceToDevice:
      return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}

}  // namespace

infiniCclResult_t RequireDevice(std::string_view call) {
  const Visibility& visibility = GetVisibility();
  if (visibility.device_count > 0) return infiniCclSuccess;
  std::string message = std::string(call) +
                        ": no CUDA device is visible (CUDA_VISIBLE_DEVICES=" + VisibleDevicesText();
  if (!visibility.why_none.empty()) message += "; " + visibility.why_none;
  message += "); the nccl backend needs a GPU (use --ccl_backend=gloo on a machine without one)";
  return Fail(infiniCclInvalidUsage, std::move(message));
}

ScopedDevice::ScopedDevice(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess || previous_ == device) {
    previous_ = -1;
    return;
  }
  cudaSetDevice(device);
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

infiniCclResult_t GetDeviceCount(int* count) {
  if (count == nullptr) return Fail(infiniCclInvalidArgument, "get_device_count: count is NULL");
  *count = GetVisibility().device_count;
  return infiniCclSuccess;
}

infiniCclResult_t SetDevice(int device) {
  CCLCHECK(RequireDevice("set_device"));
  const int device_count = GetVisibility().device_count;
  if (device < 0 || device >= device_count) {
    return Fail(infiniCclInvalidArgument, "set_device: device " + std::to_string(device) +
                                              " is not in [0, " + std::to_string(device_count) +
                                              ") (CUDA_VISIBLE_DEVICES=" + VisibleDevicesText() +
                                              ")");
  }
  return CheckCuda(cudaSetDevice(device), "set_device: cudaSetDevice");
}

infiniCclResult_t GetDevice(int* device) {
  if (device == nullptr) return Fail(infiniCclInvalidArgument, "get_device: device is NULL");
  CCLCHECK(RequireDevice("get_device"));
  return CheckCuda(cudaGetDevice(device), "get_device: cudaGetDevice");
}

namespace {

// ncclMemAlloc/ncclMemFree (NCCL >= 2.19: cuMem memory, which window
// registration needs and with which ncclCommRegister can go zero-copy), as
// nccl-tests allocates; cudaMalloc where the library lacks them or
// INFINI_CCL_NCCL_MEM_ALLOC=cuda asks for it. Chosen once per process, so
// mem_free always matches mem_alloc.
struct Allocator {
  ncclResult_t (*alloc)(void**, size_t) = nullptr;  // NULL: cudaMalloc
  ncclResult_t (*free)(void*) = nullptr;
  std::string refused;  // a value of the variable that names neither
};

const Allocator& GetAllocator() {
  static const Allocator allocator = [] {
    Allocator chosen;
    const char* asked = std::getenv("INFINI_CCL_NCCL_MEM_ALLOC");
    const std::string value = asked != nullptr ? asked : "";
    if (value == "cuda") return chosen;
    if (!value.empty() && value != "nccl") {
      chosen.refused = "INFINI_CCL_NCCL_MEM_ALLOC='" + value +
                       "': expected 'nccl' (ncclMemAlloc, the default) or 'cuda' (cudaMalloc)";
      return chosen;
    }
    chosen.alloc = reinterpret_cast<ncclResult_t (*)(void**, size_t)>(
        NcclSymbol("ncclMemAlloc", NCCL_VERSION(2, 19, 0)));
    chosen.free = reinterpret_cast<ncclResult_t (*)(void*)>(
        NcclSymbol("ncclMemFree", NCCL_VERSION(2, 19, 0)));
    if (chosen.alloc == nullptr || chosen.free == nullptr) chosen = Allocator{};
    return chosen;
  }();
  return allocator;
}

}  // namespace

infiniCclResult_t MemAlloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return Fail(infiniCclInvalidArgument, "mem_alloc: ptr is NULL");
  *ptr = nullptr;
  CCLCHECK(RequireDevice("mem_alloc"));
  if (bytes == 0) return infiniCclSuccess;
  const Allocator& allocator = GetAllocator();
  if (!allocator.refused.empty()) return Fail(infiniCclInvalidArgument, allocator.refused);
  if (allocator.alloc != nullptr) {
    const ncclResult_t result = allocator.alloc(ptr, bytes);
    if (result != ncclSuccess) *ptr = nullptr;
    return CheckNccl(result, "mem_alloc: ncclMemAlloc of " + std::to_string(bytes) + " bytes");
  }
  const cudaError_t error = cudaMalloc(ptr, bytes);
  if (error != cudaSuccess) *ptr = nullptr;
  return CheckCuda(error, "mem_alloc: cudaMalloc of " + std::to_string(bytes) + " bytes");
}

infiniCclResult_t MemFree(void* ptr) {
  if (ptr == nullptr) return infiniCclSuccess;
  const Allocator& allocator = GetAllocator();
  if (allocator.free != nullptr) return CheckNccl(allocator.free(ptr), "mem_free: ncclMemFree");
  return CheckCuda(cudaFree(ptr), "mem_free: cudaFree");
}

// Portable: the pages are pinned for every device's context in this
// process, not only the current one (a staged communicator may copy from
// another device than the one current when its buffer was registered).
infiniCclResult_t HostRegister(void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return Fail(infiniCclInvalidArgument, "host_register: expected a non-NULL range of bytes > 0");
  }
  return CheckCuda(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable),
                   "host_register: cudaHostRegister of " + std::to_string(bytes) + " bytes");
}

infiniCclResult_t HostUnregister(void* ptr) {
  if (ptr == nullptr) return Fail(infiniCclInvalidArgument, "host_unregister: ptr is NULL");
  return CheckCuda(cudaHostUnregister(ptr), "host_unregister: cudaHostUnregister");
}

// The flag is mapped pinned memory, so the GPU's front end reads the host's
// stores through the bus; Portable: every device's context in this process
// may wait on it.
infiniCclResult_t HostFlagCreate(uint32_t** flag) {
  if (flag == nullptr) return Fail(infiniCclInvalidArgument, "host_flag_create: flag is NULL");
  *flag = nullptr;
  void* memory = nullptr;
  CCLCHECK(CheckCuda(
      cudaHostAlloc(&memory, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable),
      "host_flag_create: cudaHostAlloc"));
  *flag = static_cast<uint32_t*>(memory);
  __atomic_store_n(*flag, 0u, __ATOMIC_RELEASE);
  return infiniCclSuccess;
}

infiniCclResult_t HostFlagDestroy(uint32_t* flag) {
  if (flag == nullptr) return infiniCclSuccess;
  return CheckCuda(cudaFreeHost(flag), "host_flag_destroy: cudaFreeHost");
}

namespace {

// cuStreamWaitValue32 and cuStreamWriteValue32 are driver entries the
// runtime does not wrap: found once through the runtime, so the plugin does
// not link libcuda itself.
using StreamWaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using StreamWriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

void* FindDriverEntry(const char* symbol, std::string* why) {
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t error =
      cudaGetDriverEntryPointByVersion(symbol, &entry, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t error = cudaGetDriverEntryPoint(symbol, &entry, cudaEnableDefault, &found);
#endif
  if (error != cudaSuccess || found != cudaDriverEntryPointSuccess || entry == nullptr) {
    cudaGetLastError();
    *why = "the driver has no " + std::string(symbol) + " (" +
           std::string(error != cudaSuccess ? cudaGetErrorName(error) : "symbol not found") + ")";
    return nullptr;
  }
  return entry;
}

// The flag's address for the device (it is mapped pinned memory).
infiniCclResult_t MappedFlag(const uint32_t* flag, const char* call, CUdeviceptr* mapped) {
  if (flag == nullptr) return Fail(infiniCclInvalidArgument, std::string(call) + ": flag is NULL");
  CCLCHECK(RequireDevice(call));
  void* device = nullptr;
  CCLCHECK(CheckCuda(cudaHostGetDevicePointer(&device, const_cast<uint32_t*>(flag), 0),
                     std::string(call) + ": cudaHostGetDevicePointer (not a host flag?)"));
  *mapped = reinterpret_cast<CUdeviceptr>(device);
  return infiniCclSuccess;
}

infiniCclResult_t FromDriver(CUresult result, const char* call, const char* entry) {
  if (result == CUDA_SUCCESS) return infiniCclSuccess;
  return Fail(infiniCclUnhandledDeviceError, std::string(call) + ": " + entry +
                                                 " failed with CUresult " +
                                                 std::to_string(static_cast<int>(result)));
}

}  // namespace

infiniCclResult_t StreamWaitHostFlag(infiniCclStream_t stream, const uint32_t* flag,
                                     uint32_t value) {
  static std::string why_missing;
  static const auto wait =
      reinterpret_cast<StreamWaitValue32>(FindDriverEntry("cuStreamWaitValue32", &why_missing));
  if (wait == nullptr) return Fail(infiniCclSystemError, "stream_wait_host_flag: " + why_missing);
  CUdeviceptr mapped = 0;
  CCLCHECK(MappedFlag(flag, "stream_wait_host_flag", &mapped));
  return FromDriver(
      wait(reinterpret_cast<CUstream>(ToCuda(stream)), mapped, value, CU_STREAM_WAIT_VALUE_GEQ),
      "stream_wait_host_flag", "cuStreamWaitValue32");
}

// Flags 0: the write is preceded by a memory barrier, so the bytes the
// stream's earlier copies wrote are visible before the flag is.
infiniCclResult_t StreamWriteHostFlag(infiniCclStream_t stream, uint32_t* flag, uint32_t value) {
  static std::string why_missing;
  static const auto write =
      reinterpret_cast<StreamWriteValue32>(FindDriverEntry("cuStreamWriteValue32", &why_missing));
  if (write == nullptr) return Fail(infiniCclSystemError, "stream_write_host_flag: " + why_missing);
  CUdeviceptr mapped = 0;
  CCLCHECK(MappedFlag(flag, "stream_write_host_flag", &mapped));
  return FromDriver(write(reinterpret_cast<CUstream>(ToCuda(stream)), mapped, value, 0),
                    "stream_write_host_flag", "cuStreamWriteValue32");
}

infiniCclResult_t MemcpyAsync(void* dst, const void* src, size_t bytes, infiniCclMemcpyKind_t kind,
                              infiniCclStream_t stream) {
  CCLCHECK(RequireDevice("memcpy_async"));
  if (bytes == 0) return infiniCclSuccess;
  return CheckCuda(cudaMemcpyAsync(dst, src, bytes, ToCuda(kind), ToCuda(stream)),
                   "memcpy_async: cudaMemcpyAsync");
}

infiniCclResult_t MemsetAsync(void* ptr, int value, size_t bytes, infiniCclStream_t stream) {
  CCLCHECK(RequireDevice("memset_async"));
  if (bytes == 0) return infiniCclSuccess;
  return CheckCuda(cudaMemsetAsync(ptr, value, bytes, ToCuda(stream)),
                   "memset_async: cudaMemsetAsync");
}

infiniCclResult_t StreamCreate(infiniCclStream_t* stream) {
  if (stream == nullptr) return Fail(infiniCclInvalidArgument, "stream_create: stream is NULL");
  *stream = nullptr;
  CCLCHECK(RequireDevice("stream_create"));
  // Non-blocking: our streams never wait for the legacy default stream, so
  // a framework's work elsewhere cannot serialize with collectives.
  cudaStream_t created = nullptr;
  const infiniCclResult_t result =
      CheckCuda(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking),
                "stream_create: cudaStreamCreateWithFlags");
  if (result == infiniCclSuccess) *stream = reinterpret_cast<infiniCclStream_t>(created);
  return result;
}

infiniCclResult_t StreamDestroy(infiniCclStream_t stream) {
  if (stream == nullptr) return infiniCclSuccess;  // the default stream is not ours to destroy
  return CheckCuda(cudaStreamDestroy(ToCuda(stream)), "stream_destroy: cudaStreamDestroy");
}

infiniCclResult_t StreamSynchronize(infiniCclStream_t stream) {
  CCLCHECK(RequireDevice("stream_synchronize"));
  return CheckCuda(cudaStreamSynchronize(ToCuda(stream)),
                   "stream_synchronize: cudaStreamSynchronize");
}

infiniCclResult_t StreamWaitEvent(infiniCclStream_t stream, infiniCclEvent_t event) {
  if (event == nullptr) return Fail(infiniCclInvalidArgument, "stream_wait_event: event is NULL");
  return CheckCuda(cudaStreamWaitEvent(ToCuda(stream), ToCuda(event), 0),
                   "stream_wait_event: cudaStreamWaitEvent");
}

infiniCclResult_t EventCreate(infiniCclEvent_t* event) {
  if (event == nullptr) return Fail(infiniCclInvalidArgument, "event_create: event is NULL");
  *event = nullptr;
  CCLCHECK(RequireDevice("event_create"));
  cudaEvent_t created = nullptr;  // with timing: event_elapsed_ms needs it
  const infiniCclResult_t result = CheckCuda(cudaEventCreate(&created), "event_create");
  if (result == infiniCclSuccess) *event = reinterpret_cast<infiniCclEvent_t>(created);
  return result;
}

infiniCclResult_t EventDestroy(infiniCclEvent_t event) {
  if (event == nullptr) return infiniCclSuccess;
  return CheckCuda(cudaEventDestroy(ToCuda(event)), "event_destroy: cudaEventDestroy");
}

infiniCclResult_t EventRecord(infiniCclEvent_t event, infiniCclStream_t stream) {
  if (event == nullptr) return Fail(infiniCclInvalidArgument, "event_record: event is NULL");
  return CheckCuda(cudaEventRecord(ToCuda(event), ToCuda(stream)), "event_record: cudaEventRecord");
}

infiniCclResult_t EventQuery(infiniCclEvent_t event, int* done) {
  if (event == nullptr || done == nullptr) {
    return Fail(infiniCclInvalidArgument, "event_query: event or done is NULL");
  }
  const cudaError_t error = cudaEventQuery(ToCuda(event));
  if (error == cudaErrorNotReady) {
    cudaGetLastError();
    *done = 0;
    return infiniCclSuccess;
  }
  *done = error == cudaSuccess ? 1 : 0;
  return CheckCuda(error, "event_query: cudaEventQuery");
}

infiniCclResult_t EventSynchronize(infiniCclEvent_t event) {
  if (event == nullptr) return Fail(infiniCclInvalidArgument, "event_synchronize: event is NULL");
  return CheckCuda(cudaEventSynchronize(ToCuda(event)), "event_synchronize: cudaEventSynchronize");
}

infiniCclResult_t EventElapsedMs(infiniCclEvent_t start, infiniCclEvent_t end, float* ms) {
  if (start == nullptr || end == nullptr || ms == nullptr) {
    return Fail(infiniCclInvalidArgument, "event_elapsed_ms: start, end or ms is NULL");
  }
  return CheckCuda(cudaEventElapsedTime(ms, ToCuda(start), ToCuda(end)),
                   "event_elapsed_ms: cudaEventElapsedTime");
}

}  // namespace infini::ccl::nccl
