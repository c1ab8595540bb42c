// The C++ API that framework code uses. It sits on a backend plugin (see
// plugin_abi.h) loaded with dlopen, and never names a vendor.
//
//   auto backend = infini::ccl::Backend::Load("gloo");     // or "nccl", "auto"
//   infini::ccl::UniqueId id = backend->GetUniqueId();     // on the root only
//   ... share id.ToBytes() through a store ...
//   infini::ccl::Communicator comm = backend->CommInitRank(world_size, id, rank);
//   backend->AllReduce(send, recv, infini::ccl::ReduceOp::kSum, comm, stream);
//
// Collectives take DLTensors, so any framework's tensors pass through dlpack.
// Every failure throws infini::ccl::Error carrying the plugin's explanation.
#pragma once

#include <dlpack/dlpack.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "infini/ccl/dtype.h"
#include "infini/ccl/error.h"
#include "infini/ccl/plugin_abi.h"
#include "infini/ccl/unique_id.h"

namespace infini::ccl {

enum class ReduceOp {
  kSum = infiniCclSum,
  kProd = infiniCclProd,
  kMax = infiniCclMax,
  kMin = infiniCclMin,
  kAvg = infiniCclAvg
};
std::string_view ReduceOpName(ReduceOp op);
// Inverse of ReduceOpName; throws std::invalid_argument.
ReduceOp ParseReduceOp(std::string_view name);

// Options for a new communicator; mirrors infiniCclConfig_t.
struct CommConfig {
  bool blocking = true;
  int64_t timeout_ms = 0;  // 0: backend default
  std::string name;        // for logs
  bool allow_device_sharing = false;
};

class Backend;

// A backend stream (RAII). A default-constructed Stream stands for the
// backend's default stream in collectives; Stream::Default(backend) is the
// same stream with a backend to synchronize.
class Stream {
 public:
  Stream() = default;
  explicit Stream(std::shared_ptr<const Backend> backend);  // creates a new stream
  static Stream Default(std::shared_ptr<const Backend> backend);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  infiniCclStream_t handle() const { return handle_; }
  void Synchronize() const;
  // Future work on this stream waits for `event` (no host block).
  void WaitEvent(const class Event& event) const;
  // Record, rather than run, the work enqueued on this stream until
  // EndCapture (CUDA graphs). Throws Error(infiniCclUnsupported) when the
  // backend cannot capture.
  void BeginCapture() const;
  class Graph EndCapture() const;

 private:
  std::shared_ptr<const Backend> backend_;
  infiniCclStream_t handle_ = nullptr;
  bool owned_ = false;
};

// Captured stream work (RAII), replayed with Launch.
class Graph {
 public:
  Graph() = default;
  Graph(std::shared_ptr<const Backend> backend, infiniCclGraph_t handle);
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void Launch(const Stream& stream) const;

 private:
  std::shared_ptr<const Backend> backend_;
  infiniCclGraph_t handle_ = nullptr;
};

// A backend event (RAII), for ordering streams and timing.
class Event {
 public:
  explicit Event(std::shared_ptr<const Backend> backend);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  infiniCclEvent_t handle() const { return handle_; }
  void Record(const Stream& stream) const;
  bool Query() const;  // true when the recorded work is done
  void Synchronize() const;
  // Milliseconds from `start` to this event; both recorded and complete.
  float ElapsedMsSince(const Event& start) const;

 private:
  std::shared_ptr<const Backend> backend_;
  infiniCclEvent_t handle_ = nullptr;
};

// Memory on the current device of a backend (RAII).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::shared_ptr<const Backend> backend, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // A contiguous 1-D tensor of `count` elements of `dtype`, starting at
  // element `offset` of this buffer.
  FlatTensor AsTensor(DLDataType dtype, int64_t count, int64_t offset = 0) const;
  void CopyFromHost(const void* host, size_t bytes, size_t offset_bytes = 0) const;
  void CopyToHost(void* host, size_t bytes, size_t offset_bytes = 0) const;

 private:
  std::shared_ptr<const Backend> backend_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  int device_index_ = 0;
};

// One rank's membership in a group (RAII: destroyed with comm_destroy unless
// aborted first).
class Communicator {
 public:
  Communicator() = default;
  ~Communicator();
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  bool valid() const { return handle() != nullptr; }
  infiniCclComm_t handle() const { return handle_.load(std::memory_order_acquire); }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::shared_ptr<const Backend>& backend() const { return backend_; }

  // Collective (ncclCommSplit). color < 0 → this rank joins no new group and
  // gets an invalid Communicator.
  Communicator Split(int color, int key, const CommConfig& config = {}) const;
  // Stops outstanding work without waiting; the communicator becomes
  // invalid. Safe while another thread is blocked in a collective on it.
  void Abort();
  // Waits for outstanding work and frees the communicator.
  void Destroy();

 private:
  friend class Backend;
  Communicator(std::shared_ptr<const Backend> backend, infiniCclComm_t handle);

  std::shared_ptr<const Backend> backend_;
  // Atomic: Abort() may run on a watchdog thread while the rank's thread
  // reads the handle to issue a collective.
  std::atomic<infiniCclComm_t> handle_{nullptr};
  int rank_ = -1;
  int world_size_ = 0;
};

// Where a backend came from and what it is; printed by ccl_info.
struct BackendInfo {
  std::string name;          // "gloo"
  std::string library_path;  // file that was loaded
  uint32_t abi_version = 0;  // ABI the plugin was built against
  std::string version;       // vendor library version text
  DLDeviceType device_type = kDLCPU;
};

// A loaded backend plugin (CclImpl-style): unique ids, communicators,
// grouping, collectives and the device runtime. Shared and thread-safe: one
// per plugin per process.
class Backend : public std::enable_shared_from_this<Backend> {
 public:
  // Loads (once per process) the backend named by `spec`: a name ("gloo" →
  // libinfini_ccl_gloo.so, searched in INFINI_CCL_PLUGIN_PATH, then ../lib
  // beside the executable, then the system path), a path containing '/', or
  // "auto" (nccl when it loads and sees a device, else gloo). An empty spec
  // means INFINI_CCL_BACKEND, or "auto" when that is unset.
  static std::shared_ptr<const Backend> Load(std::string_view spec = {});

  const BackendInfo& info() const { return info_; }
  const infiniCclPlugin_v1_t& plugin() const { return *plugin_; }

  // ---- Communicators (NCCL names) ----
  UniqueId GetUniqueId() const;
  Communicator CommInitRank(int world_size, const UniqueId& id, int rank,
                            const CommConfig& config = {}) const;
  // The communicator's asynchronous error state; Error::code() says which.
  infiniCclResult_t GetAsyncError(const Communicator& comm) const;
  void GroupStart() const;
  void GroupEnd() const;

  // ---- Collectives ----
  // Tensors must be contiguous, of the backend's device type, and agree in
  // dtype; counts must be consistent (e.g. all_gather: recv = world × send).
  // Violations throw Error(infiniCclInvalidArgument) before the plugin is
  // called. A default Stream is the backend's default stream.
  void AllReduce(const DLTensor& send, const DLTensor& recv, ReduceOp op, const Communicator& comm,
                 const Stream& stream = {}) const;
  void Broadcast(const DLTensor& send, const DLTensor& recv, int root, const Communicator& comm,
                 const Stream& stream = {}) const;
  void Reduce(const DLTensor& send, const DLTensor& recv, ReduceOp op, int root,
              const Communicator& comm, const Stream& stream = {}) const;
  void AllGather(const DLTensor& send, const DLTensor& recv, const Communicator& comm,
                 const Stream& stream = {}) const;
  void ReduceScatter(const DLTensor& send, const DLTensor& recv, ReduceOp op,
                     const Communicator& comm, const Stream& stream = {}) const;
  void AllToAll(const DLTensor& send, const DLTensor& recv, const Communicator& comm,
                const Stream& stream = {}) const;
  void Send(const DLTensor& send, int peer, const Communicator& comm,
            const Stream& stream = {}) const;
  void Recv(const DLTensor& recv, int peer, const Communicator& comm,
            const Stream& stream = {}) const;
  void Barrier(const Communicator& comm, const Stream& stream = {}) const;

  // ---- Device runtime ----
  int DeviceCount() const;
  void SetDevice(int device_index) const;
  int GetDevice() const;

  // Throws Error for a failed plugin call, with the plugin's explanation.
  // `what` names the call ("all_reduce"). infiniCclInProgress is not a
  // failure: with CommConfig::blocking = false, CommInitRank, Split and
  // collectives may return while the work goes on; poll GetAsyncError until
  // it is no longer infiniCclInProgress (or Abort on a deadline).
  void Check(infiniCclResult_t result, std::string_view what) const;

  Backend(const infiniCclPlugin_v1_t* plugin, BackendInfo info);

 private:
  const infiniCclPlugin_v1_t* plugin_;
  BackendInfo info_;
};

}  // namespace infini::ccl
