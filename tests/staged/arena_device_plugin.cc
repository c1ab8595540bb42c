// A device-runtime-only test plugin ("arena"): the device for staged
// communicators in CI, where no GPU is. Its "device" memory is a private
// arena that the caller cannot reach: a buffer's address is a
// non-canonical pointer (dereferencing it faults), so only memcpy_async and
// memset_async move its bytes. Its streams are queues that run only when
// something waits on them (stream_synchronize, event_synchronize,
// event_query, or a stream waiting on an event), so a copy that was
// enqueued but not waited for has not happened: a caller that reads a host
// buffer without ordering sees the old bytes. The one exception is a
// stream_write_host_flag: a stream runs by itself up to its last one, as a
// device would, so that a host thread polling the flag sees it written.
// ARENA_FREE_SYNCS=1 makes mem_free wait for every stream while no other
// thread may call the arena (cudaFree's implicit synchronization);
// ARENA_HOST_FLAGS_IGNORED=1 and ARENA_HOST_FLAG_WRITES_AHEAD=1 make it a
// broken device whose host flag waits hold nothing or whose writes do not
// wait for the work ahead of them. It is a --device_backend,
// never a --ccl_backend, but it has a small CCL of its own, as a vendor's
// device has (arena_island_ccl.h): all_reduce, reduce and broadcast among
// processes of one build on this machine, which a staged communicator uses
// to reduce inside an island of ranks of one device plugin. Those
// collectives run when called, after the work already on their stream.
//
// ARENA_DEVICE_COUNT (default 1) devices share one arena of
// ARENA_BYTES (default 1 GiB, reserved lazily). With ARENA_COUNT_COPIES=1
// the process prints "<name>: N copies, K island calls (S to L bytes)" on
// stderr at exit, so a test can tell which device a collective's bytes went
// through, and whether (and from which size) they went through its CCL; and
// "<name>: P of N copies with registered host memory" (host_register:
// whether the staging buffers were page-locked).
//
// Built twice: "arena", and with ARENA_SECOND_DEVICE "arenab", another
// vendor's device for mixed jobs: its own addresses (a pointer of one is
// never valid in the other) and 64-byte instead of 256-byte allocations.
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "arena_island_ccl.h"
#include "infini/ccl/plugin_abi.h"

namespace {

#ifdef ARENA_SECOND_DEVICE
constexpr const char* kName = "arenab";
constexpr const char* kVersion = "arenab test device 1";
constexpr uintptr_t kBase = uintptr_t{0x5000} << 48;  // non-canonical: never host memory
constexpr size_t kAlignment = 64;
#else
constexpr const char* kName = "arena";
constexpr const char* kVersion = "arena test device 1";
constexpr uintptr_t kBase = uintptr_t{0x4000} << 48;  // non-canonical: never host memory
constexpr size_t kAlignment = 256;
#endif

// Host ranges given to host_register: start -> bytes. Never destroyed: a
// communicator left to the process's end unregisters during static
// destruction, after this file's statics may be gone.
std::map<uintptr_t, size_t>& g_registered = *new std::map<uintptr_t, size_t>();

// Copies that moved bytes to or from this device (and those whose host side
// was registered), and island collectives with their least and largest
// sizes (ARENA_COUNT_COPIES).
struct CopyCounter {
  std::atomic<uint64_t> copies{0};
  std::atomic<uint64_t> registered_copies{0};
  std::atomic<uint64_t> island_calls{0};
  std::atomic<uint64_t> island_least{UINT64_MAX}, island_largest{0};
  void CountIsland(uint64_t bytes) {
    ++island_calls;
    for (uint64_t least = island_least.load(); bytes < least;) {
      if (island_least.compare_exchange_weak(least, bytes)) break;
    }
    for (uint64_t largest = island_largest.load(); bytes > largest;) {
      if (island_largest.compare_exchange_weak(largest, bytes)) break;
    }
  }
  ~CopyCounter() {
    const char* wanted = std::getenv("ARENA_COUNT_COPIES");
    if (wanted != nullptr && std::string(wanted) == "1") {
      const uint64_t calls = island_calls.load();
      std::fprintf(stderr, "%s: %llu copies, %llu island calls (%llu to %llu bytes)\n", kName,
                   static_cast<unsigned long long>(copies.load()),
                   static_cast<unsigned long long>(calls),
                   static_cast<unsigned long long>(calls == 0 ? 0 : island_least.load()),
                   static_cast<unsigned long long>(island_largest.load()));
      std::fprintf(stderr, "%s: %llu of %llu copies with registered host memory\n", kName,
                   static_cast<unsigned long long>(registered_copies.load()),
                   static_cast<unsigned long long>(copies.load()));
    }
  }
} g_copy_counter;

thread_local std::string t_error;
thread_local int t_device = 0;
// One lock for the arena, streams and events; never destroyed: engine threads
// (StartEngine) may hold it while the process exits.
std::recursive_mutex& g_mutex = *new std::recursive_mutex();
thread_local int t_lock_depth = 0;  // how often this thread holds g_mutex

// The thread synchronizing the device (SynchronizeDevice), if one is.
std::atomic<std::thread::id> g_synchronizing{std::thread::id()};

struct ArenaLock {
  ArenaLock() {
    g_mutex.lock();
    // A runtime call waits while another thread synchronizes the device.
    while (t_lock_depth == 0 && g_synchronizing.load() != std::thread::id() &&
           g_synchronizing.load() != std::this_thread::get_id()) {
      g_mutex.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      g_mutex.lock();
    }
    ++t_lock_depth;
  }
  ~ArenaLock() {
    --t_lock_depth;
    g_mutex.unlock();
  }
  ArenaLock(const ArenaLock&) = delete;
  ArenaLock& operator=(const ArenaLock&) = delete;
};

// Lets the other threads at the arena for a moment, from wherever this
// thread holds g_mutex: a stream waiting for a host flag waits for a
// thread that needs the arena to write it.
void LetOthersRun() {
  const int depth = t_lock_depth;
  for (int held = 0; held < depth; ++held) g_mutex.unlock();
  t_lock_depth = 0;
  std::this_thread::sleep_for(std::chrono::microseconds(20));
  for (int held = 0; held < depth; ++held) g_mutex.lock();
  t_lock_depth = depth;
}

infiniCclResult_t Fail(infiniCclResult_t result, std::string message) {
  t_error = std::string(kName) + ": " + std::move(message);
  return result;
}

size_t EnvSize(const char* name, size_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  return static_cast<size_t>(std::strtoull(text, nullptr, 10));
}

struct Arena {
  char* memory = nullptr;
  size_t bytes = 0;
  std::map<size_t, size_t> used;  // offset -> bytes
};

Arena& GetArena() {
  static Arena arena = [] {
    Arena made;
    made.bytes = EnvSize("ARENA_BYTES", size_t{1} << 30);
    void* mapped = mmap(nullptr, made.bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    made.memory = mapped == MAP_FAILED ? nullptr : static_cast<char*>(mapped);
    return made;
  }();
  return arena;
}

bool IsDevice(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  return address >= kBase && address < kBase + GetArena().bytes;
}

// The arena bytes behind a device range, or NULL when it is not all inside
// one allocation.
char* Resolve(const void* pointer, size_t bytes) {
  if (!IsDevice(pointer)) return nullptr;
  const size_t offset = reinterpret_cast<uintptr_t>(pointer) - kBase;
  Arena& arena = GetArena();
  auto block = arena.used.upper_bound(offset);
  if (block == arena.used.begin()) return nullptr;
  --block;
  if (offset + bytes > block->first + block->second) return nullptr;
  return arena.memory + offset;
}

struct Stream {
  std::deque<std::function<void()>> pending;
  uint64_t enqueued = 0, executed = 0;
  // A thread runs this stream's wait for a host flag, having let go of the
  // lock: no other thread runs the work behind it meanwhile.
  bool parked = false;
  // Up to the last stream_write_host_flag: work that runs by itself, on the
  // stream's engine thread (started at its first write), as a device's
  // would. The rest still runs only when waited for.
  uint64_t signalled = 0;
  bool engine = false;
};

Stream g_default_stream;

Stream* Of(infiniCclStream_t stream) {
  return stream == nullptr ? &g_default_stream : reinterpret_cast<Stream*>(stream);
}

// Every stream made (streams are never deleted), the default one first.
std::vector<Stream*>& Streams() {
  static auto* streams = new std::vector<Stream*>{&g_default_stream};
  return *streams;
}

// Runs `stream`'s work up to its `upto`-th call.
void Drain(Stream* stream, uint64_t upto) {
  while (stream->executed < upto && !stream->pending.empty()) {
    if (stream->parked) {
      LetOthersRun();
      continue;
    }
    std::function<void()> work = std::move(stream->pending.front());
    stream->pending.pop_front();
    ++stream->executed;
    work();
  }
}

void Enqueue(Stream* stream, std::function<void()> work) {
  stream->pending.push_back(std::move(work));
  ++stream->enqueued;
}

// Runs every stream's work, no other thread making a runtime call
// meanwhile (the streams' own waits for host flags still let go of the lock).
void SynchronizeDevice() {
  ArenaLock lock;
  g_synchronizing = std::this_thread::get_id();
  for (Stream* stream : Streams()) Drain(stream, stream->enqueued);
  g_synchronizing = std::thread::id();
}

struct Event {
  Stream* stream = nullptr;  // NULL: never recorded
  uint64_t point = 0;
  bool reached = false;
  std::chrono::steady_clock::time_point at;
};

infiniCclResult_t GetVersion(const char** version) {
  *version = kVersion;
  return infiniCclSuccess;
}
const char* GetErrorString(infiniCclResult_t) { return "arena test device error"; }
const char* GetLastError() { return t_error.c_str(); }
int Supports(infiniCclCollective_t collective, DLDataType dtype, infiniCclRedOp_t op) {
  switch (collective) {
    case infiniCclCollAllReduce:
      return arena_island::Supports(arena_island::Kind::kAllReduce, dtype, op) ? 1 : 0;
    case infiniCclCollReduce:
      return arena_island::Supports(arena_island::Kind::kReduce, dtype, op) ? 1 : 0;
    case infiniCclCollBroadcast:
      return arena_island::Supports(arena_island::Kind::kBroadcast, dtype, op) ? 1 : 0;
    default:
      return 0;
  }
}

int DeviceCount() { return static_cast<int>(EnvSize("ARENA_DEVICE_COUNT", 1)); }

infiniCclResult_t GetDeviceCount(int* count) {
  *count = DeviceCount();
  return infiniCclSuccess;
}
infiniCclResult_t SetDevice(int device) {
  if (device < 0 || device >= DeviceCount()) {
    return Fail(infiniCclInvalidArgument, "set_device: device " + std::to_string(device) +
                                              " is not in [0, " + std::to_string(DeviceCount()) +
                                              ")");
  }
  t_device = device;
  return infiniCclSuccess;
}
infiniCclResult_t GetDevice(int* device) {
  *device = t_device;
  return infiniCclSuccess;
}

infiniCclResult_t MemAlloc(void** pointer, size_t bytes) {
  ArenaLock lock;
  *pointer = nullptr;
  if (bytes == 0) return infiniCclSuccess;
  Arena& arena = GetArena();
  if (arena.memory == nullptr) return Fail(infiniCclSystemError, "mem_alloc: no arena");
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  size_t offset = kAlignment;  // 0 stays unused, so no buffer sits at the base
  for (const auto& [start, size] : arena.used) {
    if (start >= offset + rounded) break;
    offset = std::max(offset, (start + size + kAlignment - 1) / kAlignment * kAlignment);
  }
  if (offset + rounded > arena.bytes) {
    return Fail(infiniCclSystemError, "mem_alloc: " + std::to_string(bytes) +
                                          " bytes do not fit the arena (ARENA_BYTES=" +
                                          std::to_string(arena.bytes) + ")");
  }
  arena.used[offset] = rounded;
  *pointer = reinterpret_cast<void*>(kBase + offset);
  return infiniCclSuccess;
}

// ARENA_FREE_SYNCS=1: mem_free waits for every stream of the device while
// no other thread may use the runtime, as cudaFree may (an implicit
// synchronization): work that only another runtime call could let a
// stream finish then never finishes.
bool FreeSyncs() {
  static const bool syncs = [] {
    const char* text = std::getenv("ARENA_FREE_SYNCS");
    return text != nullptr && std::string(text) == "1";
  }();
  return syncs;
}

infiniCclResult_t MemFree(void* pointer) {
  if (FreeSyncs()) SynchronizeDevice();
  ArenaLock lock;
  if (pointer == nullptr) return infiniCclSuccess;
  if (!IsDevice(pointer) ||
      GetArena().used.erase(reinterpret_cast<uintptr_t>(pointer) - kBase) == 0) {
    return Fail(infiniCclInvalidArgument, "mem_free: not an arena allocation");
  }
  return infiniCclSuccess;
}

// Whether [pointer, pointer + bytes) lies inside one registered range.
bool IsRegistered(const void* pointer, size_t bytes) {
  const auto start = reinterpret_cast<uintptr_t>(pointer);
  auto range = g_registered.upper_bound(start);
  if (range == g_registered.begin()) return false;
  --range;
  return start + bytes <= range->first + range->second;
}

// Registration changes no byte a copy moves; it is only counted. Overlaps
// and host_unregister of an unknown pointer are refused, as CUDA does.
infiniCclResult_t HostRegister(void* pointer, size_t bytes) {
  ArenaLock lock;
  const auto start = reinterpret_cast<uintptr_t>(pointer);
  if (pointer == nullptr || bytes == 0 || IsDevice(pointer)) {
    return Fail(infiniCclInvalidArgument, "host_register: expected a host range of bytes > 0");
  }
  auto next = g_registered.lower_bound(start);
  const bool overlaps_next = next != g_registered.end() && next->first < start + bytes;
  const bool overlaps_previous =
      next != g_registered.begin() && std::prev(next)->first + std::prev(next)->second > start;
  if (overlaps_next || overlaps_previous) {
    return Fail(infiniCclInvalidArgument, "host_register: the range overlaps a registered one");
  }
  g_registered[start] = bytes;
  return infiniCclSuccess;
}

infiniCclResult_t HostUnregister(void* pointer) {
  ArenaLock lock;
  if (g_registered.erase(reinterpret_cast<uintptr_t>(pointer)) == 0) {
    return Fail(infiniCclInvalidArgument, "host_unregister: not a registered pointer");
  }
  return infiniCclSuccess;
}

infiniCclResult_t MemcpyAsync(void* dst, const void* src, size_t bytes, infiniCclMemcpyKind_t kind,
                              infiniCclStream_t stream) {
  ArenaLock lock;
  const bool device_src =
      kind == infiniCclMemcpyDeviceToHost || kind == infiniCclMemcpyDeviceToDevice;
  const bool device_dst =
      kind == infiniCclMemcpyHostToDevice || kind == infiniCclMemcpyDeviceToDevice;
  if (bytes > 0) ++g_copy_counter.copies;
  if (bytes > 0 && kind != infiniCclMemcpyDeviceToDevice &&
      IsRegistered(device_src ? dst : src, bytes)) {
    ++g_copy_counter.registered_copies;
  }
  // Each side must be what `kind` says: a host pointer named as device
  // memory (or the reverse) is the caller's bug, refused here.
  if (bytes > 0 && (IsDevice(src) != device_src || IsDevice(dst) != device_dst ||
                    (device_src && Resolve(src, bytes) == nullptr) ||
                    (device_dst && Resolve(dst, bytes) == nullptr))) {
    return Fail(infiniCclInvalidArgument,
                "memcpy_async: kind " + std::to_string(kind) +
                    " does not match the pointers, or a device range leaves its allocation");
  }
  Enqueue(Of(stream), [=] {
    char* to = device_dst ? Resolve(dst, bytes) : static_cast<char*>(dst);
    const char* from = device_src ? Resolve(src, bytes) : static_cast<const char*>(src);
    if (to != nullptr && from != nullptr && bytes > 0) std::memmove(to, from, bytes);
  });
  return infiniCclSuccess;
}

infiniCclResult_t MemsetAsync(void* pointer, int value, size_t bytes, infiniCclStream_t stream) {
  ArenaLock lock;
  if (bytes > 0 && Resolve(pointer, bytes) == nullptr) {
    return Fail(infiniCclInvalidArgument, "memset_async: not an arena range");
  }
  Enqueue(Of(stream), [=] {
    if (char* to = Resolve(pointer, bytes); to != nullptr) std::memset(to, value, bytes);
  });
  return infiniCclSuccess;
}

infiniCclResult_t StreamCreate(infiniCclStream_t* stream) {
  ArenaLock lock;
  Streams().push_back(new Stream);
  *stream = reinterpret_cast<infiniCclStream_t>(Streams().back());
  return infiniCclSuccess;
}
infiniCclResult_t StreamSynchronize(infiniCclStream_t stream) {
  ArenaLock lock;
  Drain(Of(stream), Of(stream)->enqueued);
  return infiniCclSuccess;
}
infiniCclResult_t StreamDestroy(infiniCclStream_t stream) {
  ArenaLock lock;
  // Drained and kept: a stream that waits on one of its events may still
  // name it (a test plugin's streams are few).
  return StreamSynchronize(stream);
}

infiniCclResult_t EventCreate(infiniCclEvent_t* event) {
  *event = reinterpret_cast<infiniCclEvent_t>(new Event);
  return infiniCclSuccess;
}
Event* Of(infiniCclEvent_t event) { return reinterpret_cast<Event*>(event); }

infiniCclResult_t EventRecord(infiniCclEvent_t handle, infiniCclStream_t stream) {
  ArenaLock lock;
  Event* event = Of(handle);
  Stream* on = Of(stream);
  event->stream = on;
  event->reached = false;
  Enqueue(on, [event] {
    event->reached = true;
    event->at = std::chrono::steady_clock::now();
  });
  event->point = on->enqueued;
  return infiniCclSuccess;
}
infiniCclResult_t EventSynchronize(infiniCclEvent_t handle) {
  ArenaLock lock;
  Event* event = Of(handle);
  if (event->stream != nullptr) Drain(event->stream, event->point);
  return infiniCclSuccess;
}
infiniCclResult_t EventQuery(infiniCclEvent_t handle, int* done) {
  EventSynchronize(handle);
  *done = 1;
  return infiniCclSuccess;
}
infiniCclResult_t EventDestroy(infiniCclEvent_t handle) {
  ArenaLock lock;
  EventSynchronize(handle);  // its record is queued work that names it
  delete Of(handle);
  return infiniCclSuccess;
}
infiniCclResult_t StreamWaitEvent(infiniCclStream_t stream, infiniCclEvent_t handle) {
  ArenaLock lock;
  const Event* event = Of(handle);
  if (event->stream == nullptr) return infiniCclSuccess;  // never recorded: nothing to wait for
  Stream* other = event->stream;
  const uint64_t point = event->point;
  Enqueue(Of(stream), [other, point] { Drain(other, point); });
  return infiniCclSuccess;
}
// A host flag is a plain word of host memory: the arena's "device" is
// this process. ARENA_NO_HOST_FLAGS=1 refuses to make one, so a staged
// communicator falls back to returning after its host part.
infiniCclResult_t HostFlagCreate(uint32_t** flag) {
  if (flag == nullptr) return Fail(infiniCclInvalidArgument, "host_flag_create: flag is NULL");
  *flag = nullptr;
  const char* refuse = std::getenv("ARENA_NO_HOST_FLAGS");
  if (refuse != nullptr && std::string(refuse) == "1") {
    return Fail(infiniCclUnsupported, "host_flag_create: refused (ARENA_NO_HOST_FLAGS=1)");
  }
  *flag = new uint32_t(0);
  return infiniCclSuccess;
}
infiniCclResult_t HostFlagDestroy(uint32_t* flag) {
  delete flag;
  return infiniCclSuccess;
}
infiniCclResult_t StreamWaitHostFlag(infiniCclStream_t handle, const uint32_t* flag,
                                     uint32_t value) {
  if (flag == nullptr) return Fail(infiniCclInvalidArgument, "stream_wait_host_flag: flag is NULL");
  // ARENA_HOST_FLAGS_IGNORED=1: a broken plugin whose waits hold nothing,
  // which the conformance suite must fail.
  static const bool ignored = [] {
    const char* text = std::getenv("ARENA_HOST_FLAGS_IGNORED");
    return text != nullptr && std::string(text) == "1";
  }();
  if (ignored) return infiniCclSuccess;
  ArenaLock lock;
  Stream* stream = Of(handle);
  Enqueue(stream, [stream, flag, value] {
    stream->parked = true;
    while (static_cast<int32_t>(__atomic_load_n(flag, __ATOMIC_ACQUIRE) - value) < 0) {
      LetOthersRun();
    }
    stream->parked = false;
  });
  return infiniCclSuccess;
}

// Wakes the engines (stream_write_host_flag); waited on with g_mutex held once.
std::condition_variable_any& EngineWake() {
  static auto* wake =
      new std::condition_variable_any();  // never destroyed: engines outlive statics
  return *wake;
}

// Runs `stream` up to its last host flag write whenever there is one:
// detached, as a device's engine is not the host's to stop.
void StartEngine(Stream* stream) {
  stream->engine = true;
  std::thread([stream] {
    ArenaLock lock;
    while (true) {
      EngineWake().wait(g_mutex, [stream] { return stream->executed < stream->signalled; });
      Drain(stream, stream->signalled);
    }
  }).detach();
}

// The flag is stored when the stream's work before it has run, by the
// stream's engine: nobody need wait on the stream for it.
infiniCclResult_t StreamWriteHostFlag(infiniCclStream_t handle, uint32_t* flag, uint32_t value) {
  if (flag == nullptr)
    return Fail(infiniCclInvalidArgument, "stream_write_host_flag: flag is NULL");
  // ARENA_HOST_FLAG_WRITES_AHEAD=1: a broken plugin that stores at once,
  // which the conformance suite must fail.
  static const bool ahead = [] {
    const char* text = std::getenv("ARENA_HOST_FLAG_WRITES_AHEAD");
    return text != nullptr && std::string(text) == "1";
  }();
  if (ahead) {
    __atomic_store_n(flag, value, __ATOMIC_RELEASE);
    return infiniCclSuccess;
  }
  ArenaLock lock;
  Stream* stream = Of(handle);
  Enqueue(stream, [flag, value] { __atomic_store_n(flag, value, __ATOMIC_RELEASE); });
  stream->signalled = stream->enqueued;
  if (!stream->engine) StartEngine(stream);
  EngineWake().notify_all();
  return infiniCclSuccess;
}

infiniCclResult_t EventElapsedMs(infiniCclEvent_t start, infiniCclEvent_t end, float* ms) {
  ArenaLock lock;
  if (!Of(start)->reached || !Of(end)->reached) {
    return Fail(infiniCclInvalidUsage, "event_elapsed_ms: an event has not completed");
  }
  *ms = std::chrono::duration<float, std::milli>(Of(end)->at - Of(start)->at).count();
  return infiniCclSuccess;
}

// The island CCL's entries (arena_island_ccl.h); what it lacks refuses.
constexpr const char* kNoComms =
    "the arena test device's CCL has all_reduce, reduce and broadcast only";

arena_island::Comm* IslandOf(infiniCclComm_t comm) {
  return reinterpret_cast<arena_island::Comm*>(comm);
}

infiniCclResult_t GetUniqueId(void* unique_id, const infiniCclBootstrap_t*) {
  if (unique_id == nullptr) return Fail(infiniCclInvalidArgument, "get_unique_id: NULL");
  arena_island::MakeUniqueId(unique_id);
  return infiniCclSuccess;
}
infiniCclResult_t CommInitRank(infiniCclComm_t* comm, int nranks, const void* unique_id, int rank,
                               const infiniCclConfig_t*, const infiniCclBootstrap_t*) {
  if (comm == nullptr || unique_id == nullptr) {
    return Fail(infiniCclInvalidArgument, "comm_init_rank: comm or unique_id is NULL");
  }
  arena_island::Comm* made = nullptr;
  std::string why;
  const infiniCclResult_t result = arena_island::Join(kName, unique_id, nranks, rank, &made, &why);
  *comm = reinterpret_cast<infiniCclComm_t>(made);
  return result == infiniCclSuccess ? result : Fail(result, why);
}
infiniCclResult_t Refuse() { return Fail(infiniCclUnsupported, kNoComms); }
infiniCclResult_t CommDestroy(infiniCclComm_t comm) {
  arena_island::Leave(IslandOf(comm));
  return infiniCclSuccess;
}
infiniCclResult_t CommAbort(infiniCclComm_t comm) {
  arena_island::Abort(IslandOf(comm));
  return infiniCclSuccess;
}
infiniCclResult_t CommAsyncError(infiniCclComm_t, infiniCclResult_t* error, const char**) {
  if (error != nullptr) *error = infiniCclSuccess;
  return infiniCclSuccess;
}
infiniCclResult_t CommCount(infiniCclComm_t comm, int* nranks) {
  *nranks = arena_island::SizeOf(IslandOf(comm));
  return infiniCclSuccess;
}
infiniCclResult_t CommUserRank(infiniCclComm_t comm, int* rank) {
  *rank = arena_island::RankOf(IslandOf(comm));
  return infiniCclSuccess;
}

// After the work already on `stream`, on the arena bytes behind the
// device buffers (`send` only where this rank contributes).
infiniCclResult_t Island(arena_island::Kind kind, const void* send, void* recv, size_t count,
                         DLDataType dtype, infiniCclRedOp_t op, int root, infiniCclComm_t comm,
                         infiniCclStream_t stream) {
  if (comm == nullptr) return Fail(infiniCclInvalidArgument, "collective: comm is NULL");
  arena_island::Comm* island = IslandOf(comm);
  const int rank = arena_island::RankOf(island);
  const bool reads = kind != arena_island::Kind::kBroadcast || rank == root;
  const bool writes = kind != arena_island::Kind::kReduce || rank == root;
  const size_t bytes = count * ((static_cast<size_t>(dtype.bits) * dtype.lanes + 7) / 8);
  const char* from = nullptr;
  char* to = nullptr;
  {
    ArenaLock lock;
    Drain(Of(stream), Of(stream)->enqueued);
    from = reads ? Resolve(send, bytes) : nullptr;
    to = writes ? Resolve(recv, bytes) : nullptr;
  }
  if (bytes > 0 && ((reads && from == nullptr) || (writes && to == nullptr))) {
    return Fail(infiniCclInvalidArgument, "collective: a buffer is not an arena range");
  }
  if (!arena_island::Supports(kind, dtype, op)) return Refuse();
  g_copy_counter.CountIsland(bytes);
  std::string why;
  const infiniCclResult_t result =
      arena_island::Run(island, kind, from, to, count, dtype, op, root, &why);
  return result == infiniCclSuccess ? result : Fail(result, why);
}
infiniCclResult_t AllReduce(const void* send, void* recv, size_t count, DLDataType dtype,
                            infiniCclRedOp_t op, infiniCclComm_t comm, infiniCclStream_t stream) {
  return Island(arena_island::Kind::kAllReduce, send, recv, count, dtype, op, 0, comm, stream);
}
infiniCclResult_t Broadcast(const void* send, void* recv, size_t count, DLDataType dtype, int root,
                            infiniCclComm_t comm, infiniCclStream_t stream) {
  return Island(arena_island::Kind::kBroadcast, send, recv, count, dtype, infiniCclSum, root, comm,
                stream);
}
infiniCclResult_t Reduce(const void* send, void* recv, size_t count, DLDataType dtype,
                         infiniCclRedOp_t op, int root, infiniCclComm_t comm,
                         infiniCclStream_t stream) {
  return Island(arena_island::Kind::kReduce, send, recv, count, dtype, op, root, comm, stream);
}
infiniCclResult_t ReduceScatter(const void*, void*, size_t, DLDataType, infiniCclRedOp_t,
                                infiniCclComm_t, infiniCclStream_t) {
  return Refuse();
}
infiniCclResult_t Gathering(const void*, void*, size_t, DLDataType, infiniCclComm_t,
                            infiniCclStream_t) {
  return Refuse();
}
infiniCclResult_t SendEntry(const void*, size_t, DLDataType, int, infiniCclComm_t,
                            infiniCclStream_t) {
  return Refuse();
}
infiniCclResult_t RecvEntry(void*, size_t, DLDataType, int, infiniCclComm_t, infiniCclStream_t) {
  return Refuse();
}

}  // namespace

INFINI_CCL_PLUGIN_EXPORT const infiniCclPlugin_v2_t infiniCclPlugin_v2 = {
    .struct_size = sizeof(infiniCclPlugin_v2_t),
    .abi_version = INFINI_CCL_PLUGIN_ABI_VERSION_V2,
    .name = kName,
    .get_version = GetVersion,
    .get_error_string = GetErrorString,
    .get_last_error = GetLastError,
    // Ranks of an island may share an arena device.
    .features = INFINI_CCL_FEATURE_DEVICE_SHARING,
    .supports = Supports,
    .device_type = kDLExtDev,
    .device_vendor = "test",
    .device_kind = kName,
    .visible_devices_env = nullptr,
    .get_device_count = GetDeviceCount,
    .set_device = SetDevice,
    .get_device = GetDevice,
    .mem_alloc = MemAlloc,
    .mem_free = MemFree,
    .memcpy_async = MemcpyAsync,
    .memset_async = MemsetAsync,
    .stream_create = StreamCreate,
    .stream_destroy = StreamDestroy,
    .stream_synchronize = StreamSynchronize,
    .stream_wait_event = StreamWaitEvent,
    .event_create = EventCreate,
    .event_destroy = EventDestroy,
    .event_record = EventRecord,
    .event_query = EventQuery,
    .event_synchronize = EventSynchronize,
    .event_elapsed_ms = EventElapsedMs,
    .unique_id_bytes = arena_island::kUniqueIdBytes,
    .get_unique_id = GetUniqueId,
    .comm_init_rank = CommInitRank,
    .comm_init_ranks = nullptr,
    .comm_split = nullptr,
    .comm_destroy = CommDestroy,
    .comm_abort = CommAbort,
    .comm_get_async_error = CommAsyncError,
    .comm_count = CommCount,
    .comm_user_rank = CommUserRank,
    .group_start = nullptr,
    .group_end = nullptr,
    .all_reduce = AllReduce,
    .broadcast = Broadcast,
    .reduce = Reduce,
    .all_gather = Gathering,
    .reduce_scatter = ReduceScatter,
    .send = SendEntry,
    .recv = RecvEntry,
    .all_to_all = nullptr,
    .barrier = nullptr,
    .all_to_all_v = nullptr,
    .all_gather_v = nullptr,
    .reduce_scatter_v = nullptr,
    .gather = nullptr,
    .scatter = nullptr,
    .stream_begin_capture = nullptr,
    .stream_end_capture = nullptr,
    .graph_launch = nullptr,
    .graph_destroy = nullptr,
    .init = nullptr,
    .comm_shrink = nullptr,
    .comm_revoke = nullptr,
    .comm_register = nullptr,
    .comm_deregister = nullptr,
    .comm_window_register = nullptr,
    .comm_window_deregister = nullptr,
    .get_link_bandwidth = nullptr,
    .host_register = HostRegister,
    .host_unregister = HostUnregister,
    .host_flag_create = HostFlagCreate,
    .host_flag_destroy = HostFlagDestroy,
    .stream_wait_host_flag = StreamWaitHostFlag,
    .stream_write_host_flag = StreamWriteHostFlag,
};
