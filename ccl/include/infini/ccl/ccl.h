// The C++ API that framework code uses. It sits on a backend plugin (see
// plugin_abi.h) loaded with dlopen, and never names a vendor.
//
//   auto backend = infini::ccl::Backend::Load("gloo");     // or "nccl", "auto"
//   infini::ccl::UniqueId id = backend->GetUniqueId();     // on the root only
//   ... share id.ToBytes() through a store ...
//   infini::ccl::Communicator comm = backend->CommInitRank(world_size, id, rank);
//   comm.AllReduce(send, recv, infini::ccl::ReduceOp::kSum, stream);
//
// Collectives take DLTensors, so any framework's tensors pass through dlpack.
// Every failure throws infini::ccl::Error carrying the plugin's explanation.
#pragma once

#include <dlpack/dlpack.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infini/ccl/capabilities.h"
#include "infini/ccl/dtype.h"
#include "infini/ccl/error.h"
#include "infini/ccl/plugin_abi.h"
#include "infini/ccl/unique_id.h"

namespace infini::ccl {

// One vendor option: applied by the backend named `backend`, skipped by
// every other (e.g. {"nccl", "max_ctas", "16"}).
struct VendorOption {
  std::string backend;
  std::string key;
  std::string value;
};

// Options for a new communicator; mirrors infiniCclConfig_t. An empty
// optional is "unset": the backend's default.
struct CommConfig {
  std::optional<bool> blocking;       // unset: blocking
  std::optional<int64_t> timeout_ms;  // host-side waits
  std::string name;                   // for logs
  bool allow_device_sharing = false;
  std::optional<int> stream_priority;  // the communicator's own streams
  std::vector<VendorOption> vendor_options;
};

// The key-value store a host lends a plugin (infiniCclBootstrap_t), already
// scoped to one group: keys are relative. Implementations throw Error
// (infiniCclTimeout on a deadline, infiniCclRemoteError when the store is
// gone); they are called from the plugin's threads.
class BootstrapStore {
 public:
  virtual ~BootstrapStore() = default;
  virtual void Set(const std::string& key, const std::string& value) = 0;
  // Waits for `key` up to `timeout` (negative: the store's default).
  virtual std::string Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual int64_t Add(const std::string& key, int64_t delta) = 0;
  virtual void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // `key`'s value, or nullopt at once when it is absent (the bootstrap's
  // try_get). The default asks Get with a zero timeout; a store that can
  // check without waiting should say so here.
  virtual std::optional<std::string> TryGet(const std::string& key);
};

namespace internal {
class BootstrapBridge;     // a BootstrapStore seen through the C ABI
struct PluginTableAccess;  // the raw table, for infini/ccl/plugin_table.h only
struct DeferredInit;       // a CommInitRank issued inside GroupStart/GroupEnd
}  // namespace internal

class Backend;

// A backend stream (RAII). A default-constructed Stream stands for the
// backend's default stream in collectives; Stream::Default(backend) is the
// same stream with a backend to synchronize.
class Stream {
 public:
  Stream() = default;
  explicit Stream(std::shared_ptr<const Backend> backend);  // creates a new stream
  static Stream Default(std::shared_ptr<const Backend> backend);
  // A stream the framework already owns (cudaStream_t, aclrtStream): used,
  // never destroyed. The caller keeps it alive while this Stream is used.
  static Stream Wrap(std::shared_ptr<const Backend> backend, infiniCclStream_t handle);
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

// A buffer registered with a communicator (comm_register, NCCL's
// ncclCommRegister), deregistered when destroyed: collectives on it may be
// faster. Destroy it before the communicator and before freeing the buffer.
class BufferRegistration {
 public:
  BufferRegistration() = default;
  // `window`: made by comm_window_register, so comm_window_deregister ends it.
  BufferRegistration(std::shared_ptr<const Backend> backend, infiniCclComm_t comm, void* handle,
                     bool window = false);
  ~BufferRegistration();
  BufferRegistration(BufferRegistration&& other) noexcept;
  BufferRegistration& operator=(BufferRegistration&& other) noexcept;
  BufferRegistration(const BufferRegistration&) = delete;
  BufferRegistration& operator=(const BufferRegistration&) = delete;

  bool registered() const { return comm_ != nullptr; }
  // comm_deregister now; throws Error when the plugin fails it (the
  // destructor ignores that failure).
  void Deregister();
  // Drops the handle without calling the plugin: for a communicator that is
  // revoked (deregistering there may wait on it) or about to be aborted
  // (comm_abort frees its registrations with it).
  void Forget();

 private:
  infiniCclResult_t CallDeregister(infiniCclComm_t comm, void* handle) const;

  std::shared_ptr<const Backend> backend_;
  infiniCclComm_t comm_ = nullptr;
  void* handle_ = nullptr;
  bool window_ = false;
};

// How Communicator::Shrink treats the outstanding work of the communicator
// it shrinks (comm_shrink's flags).
enum class ShrinkMode {
  kDefault,  // the parent is healthy: its work completes as usual
  kAbort,    // a peer is dead: end the parent's outstanding work first
};

// One rank's membership in a group (RAII: destroyed with comm_destroy unless
// aborted first). Collectives are its methods.
//
// At process exit: the first Backend::Load registers an atexit hook, so it
// runs before the destructors of static objects constructed before that
// load (and after those of later ones). Once it has run, the vendor runtime
// may already be torn down (CUDA's own exit handlers run in the same
// sequence), so a Communicator's destructor, Destroy() and Abort() no longer
// call the plugin: the handle is left to the process's end, and the OS
// reclaims it. Stream, Event, Graph and DeviceBuffer destructors do the
// same. A communicator in a static singleton therefore needs no leak on
// purpose; Release() is the explicit form.
//
// Tensors must be contiguous, of the backend's device type, and agree in
// dtype; counts must be consistent (all_gather: recv = world × send). A call
// the backend does not implement or declares unsupported for the dtype and
// operator, and every such violation, throws Error before the plugin is
// called. A default Stream is the backend's default stream. Roots and peers
// are ranks of this communicator.
class Communicator {
 public:
  Communicator() = default;
  ~Communicator();
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  bool valid() const { return handle() != nullptr; }
  infiniCclComm_t handle() const {
    infiniCclComm_t handle = handle_.load(std::memory_order_acquire);
    if (handle == nullptr && deferred_ != nullptr) [[unlikely]]
      handle = AdoptDeferred();
    return handle;
  }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::shared_ptr<const Backend>& backend() const { return backend_; }
  // The device this rank was made on: the backend's device type and the
  // rank's device index. The raw-pointer calls below describe their
  // buffers with it.
  DLDevice device() const { return device_; }

  void AllReduce(const DLTensor& send, const DLTensor& recv, ReduceOp op,
                 const Stream& stream = {}) const;
  // As in NCCL, send matters on the root only: elsewhere it may have no data
  // pointer (then only recv is checked). In place: send and recv alike.
  void Broadcast(const DLTensor& send, const DLTensor& recv, int root,
                 const Stream& stream = {}) const;
  // recv matters on the root only: elsewhere it may have no data pointer.
  void Reduce(const DLTensor& send, const DLTensor& recv, ReduceOp op, int root,
              const Stream& stream = {}) const;
  void AllGather(const DLTensor& send, const DLTensor& recv, const Stream& stream = {}) const;
  void ReduceScatter(const DLTensor& send, const DLTensor& recv, ReduceOp op,
                     const Stream& stream = {}) const;
  void Send(const DLTensor& send, int peer, const Stream& stream = {}) const;
  void Recv(const DLTensor& recv, int peer, const Stream& stream = {}) const;
  // Optional entries of a plugin (Capabilities::Implements says which).
  void AllToAll(const DLTensor& send, const DLTensor& recv, const Stream& stream = {}) const;
  // Without a plugin barrier: a one-element all_reduce.
  void Barrier(const Stream& stream = {}) const;
  // Counts and displacements in elements, one per rank.
  void AllToAllV(const DLTensor& send, std::span<const size_t> send_counts,
                 std::span<const size_t> send_displacements, const DLTensor& recv,
                 std::span<const size_t> recv_counts, std::span<const size_t> recv_displacements,
                 const Stream& stream = {}) const;
  void AllGatherV(const DLTensor& send, const DLTensor& recv, std::span<const size_t> recv_counts,
                  std::span<const size_t> recv_displacements, const Stream& stream = {}) const;
  void ReduceScatterV(const DLTensor& send, std::span<const size_t> send_counts,
                      std::span<const size_t> send_displacements, const DLTensor& recv, ReduceOp op,
                      const Stream& stream = {}) const;
  // recv (world × send elements) matters on the root only.
  void Gather(const DLTensor& send, const DLTensor& recv, int root,
              const Stream& stream = {}) const;
  // send (world × recv elements) matters on the root only.
  void Scatter(const DLTensor& send, const DLTensor& recv, int root,
               const Stream& stream = {}) const;

  // ---- The same on raw buffers of device(), NCCL's signatures ----
  // `count` elements of `dtype` as NCCL counts them: per rank for
  // AllGather (send; recv holds world × count), ReduceScatter (recv; send
  // holds world × count) and AllToAll (one block; each buffer holds world ×
  // count). Each builds DLTensors on device() (no allocation) and takes the
  // path above, so the checks are the same; NULL is accepted where NCCL
  // ignores the buffer (Broadcast's send and Reduce's recv off the root),
  // refused elsewhere for a non-zero count. In place as in NCCL: send ==
  // recv, or send at this rank's block of recv (AllGather) / recv at this
  // rank's block of send (ReduceScatter).
  void AllReduce(const void* send, void* recv, size_t count, DLDataType dtype, ReduceOp op,
                 const Stream& stream = {}) const;
  void Broadcast(const void* send, void* recv, size_t count, DLDataType dtype, int root,
                 const Stream& stream = {}) const;
  void Reduce(const void* send, void* recv, size_t count, DLDataType dtype, ReduceOp op, int root,
              const Stream& stream = {}) const;
  void AllGather(const void* send, void* recv, size_t send_count, DLDataType dtype,
                 const Stream& stream = {}) const;
  void ReduceScatter(const void* send, void* recv, size_t recv_count, DLDataType dtype, ReduceOp op,
                     const Stream& stream = {}) const;
  void Send(const void* send, size_t count, DLDataType dtype, int peer,
            const Stream& stream = {}) const;
  void Recv(void* recv, size_t count, DLDataType dtype, int peer, const Stream& stream = {}) const;
  void AllToAll(const void* send, void* recv, size_t count_per_rank, DLDataType dtype,
                const Stream& stream = {}) const;

  // The asynchronous state (a peer died, a kernel failed, a non-blocking call
  // still in progress); `message`, when given, gets the plugin's text.
  infiniCclResult_t GetAsyncError(std::string* message = nullptr) const;
  // Registers `bytes` bytes at `data` (this rank's device memory) with this
  // communicator (ncclCommRegister). Not collective. Throws
  // Error(infiniCclUnsupported) when the backend has no comm_register
  // (Capabilities::register_buffers()), Error(infiniCclInvalidArgument) for
  // a null buffer or no bytes, before the plugin is called.
  BufferRegistration Register(void* data, size_t bytes) const;
  // Window registration (comm_window_register, ncclCommWindowRegister):
  // collective, every rank with a buffer of the same size, in the same
  // order; its deregistration (when the result is destroyed) is
  // collective too. `flags`: INFINI_CCL_WINDOW_*. Refused as Register,
  // naming comm_window_register (Capabilities::register_windows()).
  BufferRegistration RegisterWindow(void* data, size_t bytes,
                                    uint32_t flags = INFINI_CCL_WINDOW_SYMMETRIC) const;

  // Collective (ncclCommSplit). color < 0 → this rank joins no new group and
  // gets an invalid Communicator.
  Communicator Split(int color, int key, const CommConfig& config = {}) const;
  // A new communicator of this one's ranks without `excluded_ranks`
  // (ncclCommShrink, MPI_Comm_shrink), ranks renumbered in their old order.
  // Collective over the survivors: every rank not listed calls it with the
  // same list (in any order; duplicates count once); listed ranks do not.
  // A rank out of [0, world_size()), this rank itself, or every rank is one
  // Error(infiniCclInvalidArgument) before the plugin is called; the new
  // communicator's size and rank are checked against world_size() minus
  // the excluded and the renumbered rank. This communicator stays valid
  // and still needs Destroy() or Abort(); after ShrinkMode::kAbort it
  // serves no more work. Throws Error(infiniCclUnsupported) when the
  // backend has no comm_shrink (Capabilities::shrink()). A non-blocking
  // config behaves as for Split.
  Communicator Shrink(std::span<const int> excluded_ranks, ShrinkMode mode = ShrinkMode::kDefault,
                      const CommConfig& config = {}) const;
  // Ends this communicator's outstanding work (ncclCommRevoke,
  // MPI_Comm_revoke): calls blocked on it, on any thread, return an error,
  // and later ones fail; Shrink, Destroy and Abort still work. Not
  // collective: each rank that learns of a loss revokes its own. With a
  // non-blocking backend GetAsyncError may say infiniCclInProgress until
  // the work has stopped. Throws Error(infiniCclUnsupported) when the
  // backend has no comm_revoke (Capabilities::revoke()).
  void Revoke() const;
  // Stops outstanding work without waiting; the communicator becomes
  // invalid. Safe while another thread is blocked in a collective on it.
  void Abort();
  // Waits for outstanding work and frees the communicator.
  void Destroy();
  // Gives up ownership without destroying: returns the plugin's handle (or
  // nullptr) and leaves this Communicator invalid. Nothing frees that
  // handle but the process's end, when the OS reclaims its memory and
  // devices; for a communicator kept until exit on purpose.
  infiniCclComm_t Release();

 private:
  friend class Backend;
  // `handle`'s rank and size have been checked against `rank` and
  // `world_size` by the caller (the host never takes the plugin's word).
  Communicator(std::shared_ptr<const Backend> backend, infiniCclComm_t handle, int rank,
               int world_size, std::shared_ptr<internal::BootstrapBridge> bootstrap);
  // A rank whose init waits for the outermost GroupEnd of its thread.
  Communicator(std::shared_ptr<const Backend> backend,
               std::shared_ptr<internal::DeferredInit> deferred, int rank, int world_size,
               std::shared_ptr<internal::BootstrapBridge> bootstrap);
  // Takes the handle a finished deferred init left (once); nullptr while
  // the group is open or when the init failed.
  infiniCclComm_t AdoptDeferred() const;
  // Gives up ownership of the handle (and of a deferred init's future
  // one), returning what there is to destroy or abort.
  infiniCclComm_t TakeOwnedHandle();
  // Throws unless the communicator is valid and the backend serves
  // `collective` on `dtype` with `op`.
  void Require(Collective collective, DLDataType dtype, ReduceOp op = ReduceOp::kSum) const;

  // The rank's device (device()), from the backend's device type and
  // `device_index`; every constructor calls it.
  void RecordDevice(int device_index);

  std::shared_ptr<const Backend> backend_;
  const infiniCclPlugin_t* plugin_ = nullptr;  // backend_'s table, for the hot path
  DLDevice device_{kDLCPU, 0};
  // Atomic: Abort() may run on a watchdog thread while the rank's thread
  // reads the handle to issue a collective.
  mutable std::atomic<infiniCclComm_t> handle_{nullptr};
  std::shared_ptr<internal::DeferredInit> deferred_;  // set only for a grouped init
  int rank_ = -1;
  int world_size_ = 0;
  // Lent to the plugin for this communicator's lifetime (and its splits').
  std::shared_ptr<internal::BootstrapBridge> bootstrap_;
};

// The plugin ABI versions this InfiniCCL loads, as text ("1 and 2").
std::string SupportedAbiVersions();

// Where a backend came from and what it is; printed by ccl_info.
struct BackendInfo {
  std::string name;          // "gloo"
  std::string library_path;  // file that was loaded ("transport + device" when staged)
  // A staged backend's transport file alone: what --ccl_backend loads again
  // while INFINI_CCL_DEVICE_BACKEND names the device ("" when not staged).
  std::string transport_library_path;
  uint32_t abi_version = 0;  // ABI the plugin was built against (1 is adapted)
  std::string version;       // vendor library version text
  DLDeviceType device_type = kDLCPU;
  std::string device_vendor;        // "NVIDIA", "host"
  std::string device_kind;          // "GPU", "NPU", "CPU"
  std::string visible_devices_env;  // "CUDA_VISIBLE_DEVICES", or "" (none)
  size_t unique_id_bytes = 0;
};

// The link between a backend's devices (get_link_bandwidth).
struct LinkBandwidth {
  double peak_GBps = 0;  // per direction; 0: unknown
  std::string kind;      // "NVLink 4 x 18", "PCIe gen5 x16", or "unknown: <why>"
};

// A loaded backend plugin (CclImpl-style): unique ids, communicators,
// grouping, collectives and the device runtime. Shared and thread-safe: one
// per plugin per process.
class Backend : public std::enable_shared_from_this<Backend> {
 public:
  // Loads (once per process) the backend named by `spec`: a name ("gloo" →
  // libinfini_ccl_gloo.so, searched in INFINI_CCL_PLUGIN_PATH, then ../lib
  // beside the executable, then the system path), a path containing '/', or
  // "auto" (the first installed accelerator plugin that sees a device, else
  // gloo). An empty spec means INFINI_CCL_BACKEND, or "auto" when that is
  // unset. TRANSPORT+DEVICE ("gloo+nccl") is a host transport staged
  // through a device plugin (as INFINI_CCL_DEVICE_BACKEND stages a plain
  // name); a list of TYPE:BACKEND entries ("cpu:gloo,cuda:nccl",
  // device_backends.h) loads each and returns the accelerator's.
  //
  // A plugin with an init entry gets, once, before any other call, the
  // vendor options meant for it: `options` (of the first Load of that
  // plugin; later Loads reuse the loaded backend) and those of
  // INFINI_CCL_VENDOR_OPTIONS ("BACKEND:KEY=VALUE;..."), plus the process's
  // place in the run from the launcher's environment.
  static std::shared_ptr<const Backend> Load(std::string_view spec = {},
                                             std::span<const VendorOption> options = {});

  const BackendInfo& info() const { return info_; }
  const Capabilities& capabilities() const { return capabilities_; }

  // ---- Communicators (NCCL names) ----
  // `bootstrap`, when given, is lent to the plugin (the group's scope of the
  // run's store); every rank of a group passes one or none, like the root.
  UniqueId GetUniqueId(std::shared_ptr<BootstrapStore> bootstrap = nullptr) const;
  // This rank's communicator, on the calling thread's current device.
  // Inside GroupStart/GroupEnd (NCCL's way of making several local ranks
  // from one thread) the init waits for the outermost GroupEnd, which makes
  // the group's ranks together, as CommInitRanks does, on every plugin;
  // until then the Communicator is not valid(), and GroupEnd throws what
  // any of them failed with.
  Communicator CommInitRank(int world_size, const UniqueId& id, int rank,
                            const CommConfig& config = {},
                            std::shared_ptr<BootstrapStore> bootstrap = nullptr) const;
  // Several of this process's ranks of one group in one call, ranks[i] on
  // devices[i] (cnclInitComms, HcclCommInitAll). Each returned communicator
  // may then be driven by its own thread. Uses the plugin's multi-device
  // init, or else one comm_init_rank per rank inside a group.
  std::vector<Communicator> CommInitRanks(
      int world_size, const UniqueId& id, std::span<const int> ranks, std::span<const int> devices,
      const CommConfig& config = {}, std::shared_ptr<BootstrapStore> bootstrap = nullptr) const;
  // Every rank of a group in this process, rank i on devices[i]
  // (ncclCommInitAll).
  std::vector<Communicator> CommInitAll(std::span<const int> devices,
                                        const CommConfig& config = {}) const;
  // ncclGroupStart/End. They nest; the outermost GroupEnd also makes the
  // communicators of the CommInitRank calls inside. On a plugin without
  // group entries (Capabilities::group() false) the host keeps the group:
  // collectives inside run as they are called, and Send/Recv inside throw
  // Error(infiniCclUnsupported) (only the plugin can make them wait).
  void GroupStart() const;
  void GroupEnd() const;

  // ---- Device runtime ----
  int DeviceCount() const;
  void SetDevice(int device_index) const;
  int GetDevice() const;
  // The peak link bandwidth between `device_index` and its peers, as the
  // plugin reports it; nullopt when the plugin has no get_link_bandwidth.
  std::optional<LinkBandwidth> GetLinkBandwidth(int device_index) const;
  // Memory a framework owns (its tensors' storage), in order on `stream`
  // (default: the backend's default stream); Stream::Synchronize before
  // reading what they wrote (cudaMemcpyAsync, cudaMemsetAsync).
  void MemcpyAsync(void* destination, const void* source, size_t bytes, infiniCclMemcpyKind_t kind,
                   const Stream& stream = {}) const;
  void MemsetAsync(void* destination, int byte_value, size_t bytes,
                   const Stream& stream = {}) const;

  // Throws Error for a failed plugin call, with the plugin's explanation.
  // `what` names the call ("all_reduce"). infiniCclInProgress is not a
  // failure: with CommConfig::blocking = false, CommInitRank, Split and
  // collectives may return while the work goes on; poll GetAsyncError until
  // it is no longer infiniCclInProgress (or Abort on a deadline).
  void Check(infiniCclResult_t result, std::string_view what) const;

  Backend(const infiniCclPlugin_t* plugin, BackendInfo info);

 private:
  // The plugin's communicators of ranks[i] on devices[i], made the way it
  // can (comm_init_ranks, concurrent comm_init_rank, or inside a group),
  // each checked against the rank and size asked for.
  std::vector<infiniCclComm_t> InitHandles(int world_size, const UniqueId& id,
                                           std::span<const int> ranks, std::span<const int> devices,
                                           const CommConfig& config,
                                           const infiniCclBootstrap_t* bootstrap) const;
  // Makes the communicators of the CommInitRank calls of the calling
  // thread's group that just closed.
  void RunDeferredInits() const;

  // The table stays private so that a new ABI version changes no caller's
  // code: only ccl/ and infini/ccl/plugin_table.h reach it.
  friend struct internal::PluginTableAccess;
  const infiniCclPlugin_t* plugin_;
  BackendInfo info_;
  Capabilities capabilities_;
};

}  // namespace infini::ccl
