// libinfini_ccl_kvtest.so: a working backend whose declared shape differs
// from NCCL's in every way issue 10 lists, so that tests prove the host
// adapts to it:
//  - a 4 KiB unique id (HcclRootInfo is 4108 bytes), checked whole at init;
//  - no average (HCCL, CNCL, BKCL have none): supports() says no for kAvg;
//  - init of several devices only (cnclInitComms): comm_init_rank is NULL;
//  - no capture, no group entries, no all_to_all, no barrier (the host's
//    fallback orders the ranks), but the v-collectives, gather and scatter;
//  - it needs the host's bootstrap (oneCCL's KVS) and refuses to work
//    without one.
// Its "devices" are kDLExtDev, 8 of them (KVTEST_VISIBLE_DEVICES narrows
// them), whose memory is host memory the host only touches through
// memcpy_async: proof that nothing above the ABI reads device memory or
// assumes a device type it knows. Collectives run on the calling thread over
// the bootstrap store: each rank sets its contribution under a key of the
// call's sequence number and reads the others'; the last reader empties the
// keys (a counter says who is last). Simple and slow; not for performance.
//
// KVTEST_FAULT makes it misbehave on purpose, for the tests of the
// conformance suite itself: "wrong_all_reduce" (float32 sums come back with
// element 2 off by one), "hang_broadcast" (the root never sends),
// "one_rank_comms" (comm_init_ranks quietly makes a world of one for each
// rank, as a library asked for a 1x2 layout did), "wrong_with_threads" (float32 sums are off by one
// on communicators made several to a process: wrong in one layout only), "hang_init"
// (comm_init_ranks never returns, and cannot be aborted: there is no handle yet),
// "wrong_shrink_size" (comm_shrink's communicator claims the parent's size),
// "broken_register" (comm_register fails), "hang_load" (the process-wide init
// entry never returns), "recv_any_source" (a receive takes the lowest peer's
// message that is there, whichever peer it asked for),
// "shrink_rotates_ranks" (comm_shrink's survivors are numbered in the wrong
// order).
//
// KVTEST_REGISTRATION_LOG=FILE appends a line per registration event, for
// tests that count who registers what: "<pid> register <comm> <id> <bytes>",
// "<pid> deregister <comm> <id>", "<pid> destroy <comm>", "<pid> abort <comm>"
// (<id> is unique per process; a comm's address may be reused after it ends).
//
// Built twice: KVTEST_ONE_RANK_PER_PROCESS gives libinfini_ccl_kvtest_one.so,
// which declares INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS (oneCCL's CPU
// build) and so must never be asked for two ranks in a process.
//
// Its init entry takes one vendor option, "poll_ms" (how often a wait
// looks again), and refuses any other key, as a port should.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/plugin_abi.h"
#include "infini/conformance/reference.h"

namespace {

constexpr const char* kName = "kvtest";
constexpr size_t kUniqueIdBytes = 4096;
constexpr int kDefaultDeviceCount = 8;
int64_t g_poll_ms = 100;                        // a wait checks for abort this often (poll_ms)
constexpr int64_t kDefaultTimeoutMs = 300'000;  // a wait for a peer gives up after this

thread_local std::string t_last_error;

bool Fault(const char* name) {
  const char* fault = std::getenv("KVTEST_FAULT");
  return fault != nullptr && std::strcmp(fault, name) == 0;
}
thread_local int t_current_device = 0;

infiniCclResult_t Fail(infiniCclResult_t code, std::string why) {
  t_last_error = std::string(kName) + ": " + std::move(why);
  return code;
}

// ---- Unique id: 4096 bytes, every one of them checked ----------------------

// Byte `index` of the id whose first 8 bytes are `nonce`.
unsigned char IdByte(uint64_t nonce, size_t index) {
  return static_cast<unsigned char>((nonce >> ((index % 8) * 8)) ^ (index * 131 + 7));
}

uint64_t NonceOf(const void* unique_id) {
  uint64_t nonce = 0;
  std::memcpy(&nonce, unique_id, sizeof(nonce));
  return nonce;
}

// Empty when the id is whole, else what is wrong with it.
std::string CheckId(const void* unique_id) {
  const auto* bytes = static_cast<const unsigned char*>(unique_id);
  const uint64_t nonce = NonceOf(unique_id);
  for (size_t index = sizeof(nonce); index < kUniqueIdBytes; ++index) {
    if (bytes[index] != IdByte(nonce, index)) {
      return "the unique id is damaged at byte " + std::to_string(index) + " of " +
             std::to_string(kUniqueIdBytes) + " (cut short or altered on its way to this rank)";
    }
  }
  return "";
}

// ---- A communicator ------------------------------------------------------------

// A buffer registered with a communicator (comm_register, comm_window_register).
struct Registration {
  void* buffer;
  size_t bytes;
  uint64_t id;
};

struct Comm {
  // What is still registered goes with the communicator, as NCCL frees a
  // communicator's registrations at destroy and abort (the host only
  // forgets those of a revoked or aborted one).
  ~Comm() {
    for (Registration* registration : registrations) delete registration;
  }

  infiniCclBootstrap_t bootstrap{};  // the host's; valid until we are destroyed
  std::string prefix;                // keys of this communicator: "<nonce>/..."
  int rank = 0;
  int nranks = 0;
  int device = 0;
  int64_t timeout_ms = kDefaultTimeoutMs;
  bool several_in_process = false;       // made by one comm_init_ranks call with others
  uint64_t sequence = 0;                 // collectives issued (the same on every rank)
  std::vector<uint64_t> sent, received;  // point-to-point messages per peer
  std::atomic<bool> aborted{false};
  std::atomic<bool> revoked{false};  // comm_revoke, or comm_shrink's abort flag
  uint64_t shrinks = 0;              // comm_shrink calls (the same on every survivor)

  // Abort may come from another thread while a call runs: the last of them
  // frees the communicator.
  std::mutex mutex;
  int busy = 0;
  bool released = false;
  std::set<Registration*> registrations;  // not yet deregistered; under `mutex`
};

// Holds a communicator for one call; frees it at the end if it was
// released (destroyed or aborted) meanwhile.
class CommUse {
 public:
  explicit CommUse(Comm* comm) : comm_(comm) {
    std::lock_guard<std::mutex> lock(comm_->mutex);
    ++comm_->busy;
  }
  ~CommUse() {
    bool free_now = false;
    {
      std::lock_guard<std::mutex> lock(comm_->mutex);
      free_now = --comm_->busy == 0 && comm_->released;
    }
    if (free_now) delete comm_;
  }
  CommUse(const CommUse&) = delete;
  CommUse& operator=(const CommUse&) = delete;

 private:
  Comm* comm_;
};

void Release(Comm* comm) {
  bool free_now = false;
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    comm->released = true;
    free_now = comm->busy == 0;
  }
  if (free_now) delete comm;
}

Comm* CommOf(infiniCclComm_t handle) { return reinterpret_cast<Comm*>(handle); }

// ---- The store, as this plugin uses it ------------------------------------------

infiniCclResult_t StoreFailure(const Comm& comm, infiniCclResult_t code, const std::string& what) {
  return Fail(code, what + ": " + comm.bootstrap.get_last_error(comm.bootstrap.context));
}

infiniCclResult_t Put(const Comm& comm, const std::string& key, const void* data, size_t bytes) {
  const infiniCclResult_t result =
      comm.bootstrap.set(comm.bootstrap.context, (comm.prefix + key).c_str(), data, bytes);
  return result == infiniCclSuccess ? result
                                    : StoreFailure(comm, result, "store set '" + key + "'");
}

// Waits for `key` in short slices, so that comm_abort ends the wait.
infiniCclResult_t Take(const Comm& comm, const std::string& key, void* data, size_t bytes) {
  const std::string full_key = comm.prefix + key;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(comm.timeout_ms);
  while (true) {
    if (comm.aborted.load()) {
      return Fail(infiniCclAborted, "the communicator was aborted while waiting for '" + key + "'");
    }
    if (comm.revoked.load()) {
      return Fail(infiniCclRemoteError,
                  "the communicator was revoked while waiting for '" + key + "'");
    }
    size_t found = 0;
    const infiniCclResult_t result = comm.bootstrap.get(comm.bootstrap.context, full_key.c_str(),
                                                        data, bytes, &found, g_poll_ms);
    if (result == infiniCclSuccess) {
      if (found == bytes) return infiniCclSuccess;
      return Fail(infiniCclInvalidUsage, "'" + key + "' holds " + std::to_string(found) +
                                             " bytes, expected " + std::to_string(bytes) +
                                             " (ranks called with different counts or types)");
    }
    if (result != infiniCclTimeout) return StoreFailure(comm, result, "store get '" + key + "'");
    if (std::chrono::steady_clock::now() > deadline) {
      return Fail(infiniCclTimeout,
                  "no peer set '" + key + "' within " + std::to_string(comm.timeout_ms) + " ms");
    }
  }
}

// Called by each rank once it has read every key of collective `call` it
// needs: the last one empties the keys (`written` per call) to free the
// store's memory (the bootstrap has no delete).
infiniCclResult_t Finish(const Comm& comm, const std::string& call,
                         const std::vector<std::string>& written) {
  int64_t done = 0;
  const std::string counter = comm.prefix + call + "/done";
  infiniCclResult_t result = comm.bootstrap.add(comm.bootstrap.context, counter.c_str(), 1, &done);
  if (result != infiniCclSuccess) return StoreFailure(comm, result, "store add '" + counter + "'");
  if (done < comm.nranks) return infiniCclSuccess;
  for (const std::string& key : written) {
    result = Put(comm, key, "", 0);
    if (result != infiniCclSuccess) return result;
  }
  return infiniCclSuccess;
}

std::string CallKey(const Comm& comm) { return "c" + std::to_string(comm.sequence); }
std::string RankKey(const std::string& call, int rank) { return call + "/" + std::to_string(rank); }

// ---- Host arithmetic ------------------------------------------------------------

size_t WidthOf(DLDataType dtype) { return (static_cast<size_t>(dtype.bits) * dtype.lanes + 7) / 8; }

double Combine(DLDataType dtype, infiniCclRedOp_t op, double a, double b) {
  if (dtype.code == INFINI_CCL_DL_BOOL) {
    const bool any = op == infiniCclSum || op == infiniCclMax;
    return any ? (a != 0 || b != 0) : (a != 0 && b != 0);
  }
  switch (op) {
    case infiniCclProd:
      return a * b;
    case infiniCclMax:
      return a > b ? a : b;
    case infiniCclMin:
      return a < b ? a : b;
    default:
      return a + b;
  }
}

// out[i] = op over `inputs` (each `count` elements of `dtype`, rank order).
void ReduceInto(DLDataType dtype, infiniCclRedOp_t op,
                const std::vector<const unsigned char*>& inputs, size_t count, void* out) {
  const size_t width = WidthOf(dtype);
  auto* bytes = static_cast<unsigned char*>(out);
  for (size_t index = 0; index < count; ++index) {
    double value = infini::conformance::DecodeElement(dtype, inputs[0] + index * width);
    for (size_t rank = 1; rank < inputs.size(); ++rank) {
      value = Combine(dtype, op, value,
                      infini::conformance::DecodeElement(dtype, inputs[rank] + index * width));
    }
    infini::conformance::EncodeElement(dtype, value, bytes + index * width);
  }
}

// ---- One collective: every rank publishes, then reads what it needs ---------------

// Publishes `bytes` of `data` as this rank's contribution to the current
// call and reads every rank's (this rank's own from memory) into
// `contributions`. `wanted(rank)` says whose this rank reads.
template <typename Wanted>
infiniCclResult_t Exchange(Comm& comm, const void* data, size_t bytes, size_t peer_bytes,
                           Wanted wanted, std::vector<std::vector<unsigned char>>* contributions,
                           bool publish = true) {
  const std::string call = CallKey(comm);
  ++comm.sequence;
  contributions->assign(static_cast<size_t>(comm.nranks), {});
  std::vector<std::string> written;
  if (publish) {
    infiniCclResult_t result = Put(comm, RankKey(call, comm.rank), data, bytes);
    if (result != infiniCclSuccess) return result;
  }
  for (int rank = 0; rank < comm.nranks; ++rank) {
    written.push_back(RankKey(call, rank));
    if (!wanted(rank)) continue;
    auto& slot = (*contributions)[static_cast<size_t>(rank)];
    if (rank == comm.rank) {
      const auto* begin = static_cast<const unsigned char*>(data);
      slot.assign(begin, begin + bytes);
      continue;
    }
    slot.resize(peer_bytes);
    infiniCclResult_t result = Take(comm, RankKey(call, rank), slot.data(), peer_bytes);
    if (result != infiniCclSuccess) return result;
  }
  return Finish(comm, call, written);
}

bool Everyone(int) { return true; }

// ---- Entries: information ------------------------------------------------------

infiniCclResult_t GetVersion(const char** version) {
  *version = "kvtest 2 (collectives over the host's bootstrap store)";
  return infiniCclSuccess;
}

const char* GetErrorString(infiniCclResult_t result) {
  static const char* const kNames[] = {"success",        "device error",     "system error",
                                       "internal error", "invalid argument", "invalid usage",
                                       "remote error",   "in progress",      "timeout",
                                       "aborted",        "unsupported"};
  const int index = static_cast<int>(result);
  return index >= 0 && index < infiniCclNumResults ? kNames[index] : "unknown result";
}

const char* GetLastError() { return t_last_error.c_str(); }

int Supports(infiniCclCollective_t collective, DLDataType dtype, infiniCclRedOp_t op) {
  if (dtype.lanes != 1) return 0;
  return infiniCclCollectiveReduces(collective) && op == infiniCclAvg ? 0 : 1;
}

// ---- Entries: device runtime (host memory behind kDLExtDev) --------------------

int VisibleDeviceCount() {
  const char* visible = std::getenv("KVTEST_VISIBLE_DEVICES");
  if (visible == nullptr) return kDefaultDeviceCount;
  if (*visible == '\0') return 0;
  int count = 1;
  for (const char* c = visible; *c != '\0'; ++c) count += *c == ',';
  return count;
}

infiniCclResult_t GetDeviceCount(int* count) {
  *count = VisibleDeviceCount();
  return infiniCclSuccess;
}

infiniCclResult_t SetDevice(int device) {
  const int count = VisibleDeviceCount();
  if (device < 0 || device >= count) {
    return Fail(infiniCclInvalidArgument, "device " + std::to_string(device) + " is outside the " +
                                              std::to_string(count) +
                                              " visible devices (KVTEST_VISIBLE_DEVICES)");
  }
  t_current_device = device;
  return infiniCclSuccess;
}

infiniCclResult_t GetDevice(int* device) {
  *device = t_current_device;
  return infiniCclSuccess;
}

infiniCclResult_t MemAlloc(void** ptr, size_t bytes) {
  *ptr = bytes == 0 ? nullptr : std::malloc(bytes);
  if (bytes != 0 && *ptr == nullptr) {
    return Fail(infiniCclSystemError,
                "out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  return infiniCclSuccess;
}

infiniCclResult_t MemFree(void* ptr) {
  std::free(ptr);
  return infiniCclSuccess;
}

infiniCclResult_t MemcpyAsync(void* dst, const void* src, size_t bytes, infiniCclMemcpyKind_t,
                              infiniCclStream_t) {
  if (bytes != 0) std::memmove(dst, src, bytes);
  return infiniCclSuccess;
}

infiniCclResult_t MemsetAsync(void* ptr, int value, size_t bytes, infiniCclStream_t) {
  if (bytes != 0) std::memset(ptr, value, bytes);
  return infiniCclSuccess;
}

// Work runs on the calling thread: a stream is only a handle.
infiniCclResult_t StreamCreate(infiniCclStream_t* stream) {
  *stream = reinterpret_cast<infiniCclStream_t>(new int(0));
  return infiniCclSuccess;
}
infiniCclResult_t StreamDestroy(infiniCclStream_t stream) {
  delete reinterpret_cast<int*>(stream);
  return infiniCclSuccess;
}
infiniCclResult_t StreamSynchronize(infiniCclStream_t) { return infiniCclSuccess; }
infiniCclResult_t StreamWaitEvent(infiniCclStream_t, infiniCclEvent_t) { return infiniCclSuccess; }

struct Event {
  std::chrono::steady_clock::time_point recorded{};
};

infiniCclResult_t EventCreate(infiniCclEvent_t* event) {
  *event = reinterpret_cast<infiniCclEvent_t>(new Event);
  return infiniCclSuccess;
}
infiniCclResult_t EventDestroy(infiniCclEvent_t event) {
  delete reinterpret_cast<Event*>(event);
  return infiniCclSuccess;
}
infiniCclResult_t EventRecord(infiniCclEvent_t event, infiniCclStream_t) {
  reinterpret_cast<Event*>(event)->recorded = std::chrono::steady_clock::now();
  return infiniCclSuccess;
}
infiniCclResult_t EventQuery(infiniCclEvent_t, int* done) {
  *done = 1;
  return infiniCclSuccess;
}
infiniCclResult_t EventSynchronize(infiniCclEvent_t) { return infiniCclSuccess; }
infiniCclResult_t EventElapsedMs(infiniCclEvent_t start, infiniCclEvent_t end, float* ms) {
  *ms = std::chrono::duration<float, std::milli>(reinterpret_cast<Event*>(end)->recorded -
                                                 reinterpret_cast<Event*>(start)->recorded)
            .count();
  return infiniCclSuccess;
}

// ---- Entries: communicators -------------------------------------------------------

infiniCclResult_t NeedBootstrap(const char* entry) {
  return Fail(infiniCclInvalidUsage,
              std::string(entry) +
                  " needs the host's bootstrap (the run's store) and got none: create "
                  "communicators through parallel/ or pass a BootstrapStore to GetUniqueId and "
                  "CommInitRank(s)");
}

// ---- Process-wide setup ---------------------------------------------------------

infiniCclResult_t Init(const infiniCclPluginInit_t* init) {
  while (Fault("hang_load")) std::this_thread::sleep_for(std::chrono::seconds(1));
  for (size_t i = 0; i < init->option_count; ++i) {
    const std::string key = init->option_keys[i], value = init->option_values[i];
    if (key != "poll_ms") {
      return Fail(infiniCclInvalidUsage, "unknown vendor option '" + key + "' (known: poll_ms)");
    }
    char* end = nullptr;
    const long long poll_ms = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || poll_ms < 1 || poll_ms > 10'000) {
      return Fail(infiniCclInvalidUsage,
                  "vendor option poll_ms='" + value + "': expected 1..10000 milliseconds");
    }
    g_poll_ms = poll_ms;
  }
  return infiniCclSuccess;
}

std::string IdKey(uint64_t nonce) { return "id/" + std::to_string(nonce); }

infiniCclResult_t GetUniqueId(void* unique_id, const infiniCclBootstrap_t* bootstrap) {
  if (bootstrap == nullptr) return NeedBootstrap("get_unique_id");
  std::random_device entropy;
  const uint64_t nonce = (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  auto* bytes = static_cast<unsigned char*>(unique_id);
  std::memcpy(bytes, &nonce, sizeof(nonce));
  for (size_t index = sizeof(nonce); index < kUniqueIdBytes; ++index) {
    bytes[index] = IdByte(nonce, index);
  }
  // The root's copy, so every rank can prove its id arrived whole.
  const std::string key = IdKey(nonce);
  const infiniCclResult_t result =
      bootstrap->set(bootstrap->context, key.c_str(), unique_id, kUniqueIdBytes);
  if (result != infiniCclSuccess) {
    return Fail(result,
                "store set '" + key + "': " + bootstrap->get_last_error(bootstrap->context));
  }
  return infiniCclSuccess;
}

int64_t TimeoutOf(const infiniCclConfig_t* config) {
  if (config == nullptr ||
      config->struct_size < INFINI_CCL_STRUCT_SIZE(infiniCclConfig_t, timeout_ms) ||
      config->timeout_ms == INFINI_CCL_CONFIG_UNDEF_INT64 || config->timeout_ms <= 0) {
    return kDefaultTimeoutMs;
  }
  return config->timeout_ms;
}

Comm* NewComm(const infiniCclBootstrap_t& bootstrap, std::string prefix, int rank, int nranks,
              int device, int64_t timeout_ms) {
  auto* comm = new Comm;
  comm->bootstrap = bootstrap;
  comm->prefix = std::move(prefix);
  comm->rank = rank;
  comm->nranks = nranks;
  comm->device = device;
  comm->timeout_ms = timeout_ms;
  comm->sent.assign(static_cast<size_t>(nranks), 0);
  comm->received.assign(static_cast<size_t>(nranks), 0);
  return comm;
}

// Every rank of the group says it has joined; returns once all have.
infiniCclResult_t Join(Comm& comm) {
  std::vector<std::vector<unsigned char>> ignored;
  const unsigned char here = 1;
  return Exchange(comm, &here, 1, 1, Everyone, &ignored);
}

infiniCclResult_t CommInitRanks(infiniCclComm_t* comms, int ncomms, const int* devices,
                                const int* ranks, int nranks, const void* unique_id,
                                const infiniCclConfig_t* config,
                                const infiniCclBootstrap_t* bootstrap) {
  if (bootstrap == nullptr) return NeedBootstrap("comm_init_ranks");
  if (ncomms < 1 || nranks < 1) {
    return Fail(infiniCclInvalidArgument, "comm_init_ranks: ncomms=" + std::to_string(ncomms) +
                                              ", nranks=" + std::to_string(nranks) +
                                              ": expected at least one of each");
  }
  if (std::string damage = CheckId(unique_id); !damage.empty()) {
    return Fail(infiniCclInvalidArgument, damage);
  }
  while (Fault("hang_init")) std::this_thread::sleep_for(std::chrono::seconds(1));
  const uint64_t nonce = NonceOf(unique_id);
  std::vector<unsigned char> root_copy(kUniqueIdBytes);
  size_t found = 0;
  const std::string id_key = IdKey(nonce);
  infiniCclResult_t result = bootstrap->get(bootstrap->context, id_key.c_str(), root_copy.data(),
                                            root_copy.size(), &found, TimeoutOf(config));
  if (result != infiniCclSuccess) {
    return Fail(result, "store get '" + id_key +
                            "' (the root's id): " + bootstrap->get_last_error(bootstrap->context));
  }
  if (found != kUniqueIdBytes || std::memcmp(root_copy.data(), unique_id, kUniqueIdBytes) != 0) {
    return Fail(infiniCclInvalidArgument,
                "this rank's unique id differs from the one its root made (the store holds " +
                    std::to_string(found) + " bytes under '" + id_key + "')");
  }
  std::vector<Comm*> made;
  for (int index = 0; index < ncomms; ++index) {
    if (ranks[index] < 0 || ranks[index] >= nranks) {
      for (Comm* comm : made) delete comm;
      return Fail(infiniCclInvalidArgument, "rank " + std::to_string(ranks[index]) +
                                                " is outside [0, " + std::to_string(nranks) + ")");
    }
    if (Fault("one_rank_comms")) {
      // A world of one, under keys no other rank uses.
      made.push_back(NewComm(*bootstrap,
                             std::to_string(nonce) + "/alone" + std::to_string(ranks[index]) + "/",
                             0, 1, devices[index], TimeoutOf(config)));
    } else {
      made.push_back(NewComm(*bootstrap, std::to_string(nonce) + "/", ranks[index], nranks,
                             devices[index], TimeoutOf(config)));
    }
    made.back()->several_in_process = ncomms > 1;
  }
  // All of this process's ranks announce themselves before any waits, so
  // one thread can hold several ranks of the group.
  for (Comm* comm : made) {
    const unsigned char here = 1;
    result = Put(*comm, RankKey(CallKey(*comm), comm->rank), &here, 1);
    if (result != infiniCclSuccess) break;
  }
  for (Comm* comm : made) {
    if (result != infiniCclSuccess) break;
    std::vector<std::vector<unsigned char>> ignored;
    const unsigned char here = 1;
    result = Exchange(*comm, &here, 1, 1, Everyone, &ignored, /*publish=*/false);
  }
  if (result != infiniCclSuccess) {
    for (Comm* comm : made) delete comm;
    return result;
  }
  for (int index = 0; index < ncomms; ++index) {
    comms[index] = reinterpret_cast<infiniCclComm_t>(made[static_cast<size_t>(index)]);
  }
  return infiniCclSuccess;
}

infiniCclResult_t CommSplit(infiniCclComm_t handle, int color, int key, infiniCclComm_t* newcomm,
                            const infiniCclConfig_t* config) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const std::string call = CallKey(comm);
  const int64_t mine[2] = {color, key};
  std::vector<std::vector<unsigned char>> all;
  infiniCclResult_t result = Exchange(comm, mine, sizeof(mine), sizeof(mine), Everyone, &all);
  if (result != infiniCclSuccess) return result;
  *newcomm = nullptr;
  if (color < 0) return infiniCclSuccess;
  // Members of this color, ordered by key, then by old rank.
  std::vector<std::pair<int64_t, int>> members;
  for (int rank = 0; rank < comm.nranks; ++rank) {
    int64_t theirs[2];
    std::memcpy(theirs, all[static_cast<size_t>(rank)].data(), sizeof(theirs));
    if (theirs[0] == color) members.emplace_back(theirs[1], rank);
  }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  while (members[static_cast<size_t>(new_rank)].second != comm.rank) ++new_rank;
  Comm* child = NewComm(comm.bootstrap, comm.prefix + call + "s" + std::to_string(color) + "/",
                        new_rank, static_cast<int>(members.size()), comm.device,
                        config != nullptr ? TimeoutOf(config) : comm.timeout_ms);
  result = Join(*child);
  if (result != infiniCclSuccess) {
    delete child;
    return result;
  }
  *newcomm = reinterpret_cast<infiniCclComm_t>(child);
  return infiniCclSuccess;
}

// Only the survivors call it, with the same sorted list: each works out its
// new rank and meets the others under keys of this shrink alone.
infiniCclResult_t CommShrink(infiniCclComm_t handle, const int32_t* excluded_ranks,
                             int32_t excluded_count, const infiniCclConfig_t* config, int32_t flags,
                             infiniCclComm_t* new_comm) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  *new_comm = nullptr;
  if ((flags & INFINI_CCL_SHRINK_ABORT) != 0) comm.revoked.store(true);
  int below = 0;
  std::string list;
  for (int32_t index = 0; index < excluded_count; ++index) {
    below += excluded_ranks[index] < comm.rank;
    list += std::to_string(excluded_ranks[index]) + ".";
  }
  int new_rank = comm.rank - below;
  // "shrink_rotates_ranks": the right size, the survivors in the wrong order.
  if (Fault("shrink_rotates_ranks")) new_rank = (new_rank + 1) % (comm.nranks - excluded_count);
  Comm* child = NewComm(comm.bootstrap,
                        comm.prefix + "shrink" + std::to_string(comm.shrinks++) + "/x" + list + "/",
                        new_rank, comm.nranks - excluded_count, comm.device,
                        config != nullptr ? TimeoutOf(config) : comm.timeout_ms);
  const infiniCclResult_t result = Join(*child);
  if (result != infiniCclSuccess) {
    delete child;
    return result;
  }
  if (Fault("wrong_shrink_size")) child->nranks = comm.nranks;  // joined right, then lies
  *new_comm = reinterpret_cast<infiniCclComm_t>(child);
  return infiniCclSuccess;
}

infiniCclResult_t CommRevoke(infiniCclComm_t handle) {
  CommOf(handle)->revoked.store(true);
  return infiniCclSuccess;
}

// Registration records the buffer and checks it comes back; the host
// memory needs no more ("broken_register": comm_register fails, as a
// library whose registration is declared but broken).
void LogRegistration(const char* event, const void* comm, uint64_t id = 0, size_t bytes = 0) {
  const char* path = std::getenv("KVTEST_REGISTRATION_LOG");
  if (path == nullptr || *path == '\0') return;
  static std::mutex log_mutex;
  std::lock_guard lock(log_mutex);
  if (FILE* log = std::fopen(path, "a")) {
    std::fprintf(log, "%d %s %p %llu %zu\n", static_cast<int>(getpid()), event, comm,
                 static_cast<unsigned long long>(id), bytes);
    std::fclose(log);
  }
}

infiniCclResult_t CommRegister(infiniCclComm_t handle, void* buffer, size_t bytes,
                               void** registration) {
  if (handle == nullptr || buffer == nullptr || bytes == 0 || registration == nullptr) {
    return Fail(infiniCclInvalidArgument, "comm_register: a NULL argument or 0 bytes");
  }
  if (Fault("broken_register")) return Fail(infiniCclInternalError, "comm_register: broken");
  static std::atomic<uint64_t> next_id{1};
  auto* made = new Registration{buffer, bytes, next_id++};
  LogRegistration("register", handle, made->id, bytes);
  {
    std::lock_guard<std::mutex> lock(CommOf(handle)->mutex);
    CommOf(handle)->registrations.insert(made);
  }
  *registration = made;
  return infiniCclSuccess;
}

infiniCclResult_t CommDeregister(infiniCclComm_t handle, void* registration) {
  if (handle == nullptr || registration == nullptr) {
    return Fail(infiniCclInvalidArgument, "comm_deregister: a NULL argument");
  }
  auto* registered = static_cast<Registration*>(registration);
  {
    std::lock_guard<std::mutex> lock(CommOf(handle)->mutex);
    if (CommOf(handle)->registrations.erase(registered) == 0) {
      return Fail(infiniCclInvalidArgument, "comm_deregister: not registered with this comm");
    }
  }
  LogRegistration("deregister", handle, registered->id, registered->bytes);
  delete registered;
  return infiniCclSuccess;
}

// Host memory needs no window either: a window is a registration whose
// flags are checked (every rank calls it, as the ABI asks, but nothing here
// depends on that).
infiniCclResult_t CommWindowRegister(infiniCclComm_t handle, void* buffer, size_t bytes,
                                     uint32_t flags, void** registration) {
  if ((flags & ~uint32_t{INFINI_CCL_WINDOW_SYMMETRIC}) != 0) {
    return Fail(infiniCclInvalidArgument, "comm_window_register: unknown flags");
  }
  return CommRegister(handle, buffer, bytes, registration);
}

infiniCclResult_t CommDestroy(infiniCclComm_t handle) {
  if (handle != nullptr) {
    LogRegistration("destroy", handle);
    Release(CommOf(handle));
  }
  return infiniCclSuccess;
}

infiniCclResult_t CommAbort(infiniCclComm_t handle) {
  if (handle == nullptr) return infiniCclSuccess;
  LogRegistration("abort", handle);
  CommOf(handle)->aborted.store(true);
  Release(CommOf(handle));
  return infiniCclSuccess;
}

infiniCclResult_t CommGetAsyncError(infiniCclComm_t handle, infiniCclResult_t* async_error,
                                    const char** message) {
  const bool aborted = CommOf(handle)->aborted.load();
  const bool revoked = CommOf(handle)->revoked.load();
  *async_error = aborted ? infiniCclAborted : revoked ? infiniCclRemoteError : infiniCclSuccess;
  if (message != nullptr) {
    *message = aborted   ? "kvtest: the communicator was aborted"
               : revoked ? "kvtest: the communicator was revoked"
                         : "";
  }
  return infiniCclSuccess;
}

infiniCclResult_t CommCount(infiniCclComm_t handle, int* nranks) {
  *nranks = CommOf(handle)->nranks;
  return infiniCclSuccess;
}

infiniCclResult_t CommUserRank(infiniCclComm_t handle, int* rank) {
  *rank = CommOf(handle)->rank;
  return infiniCclSuccess;
}

// ---- Entries: collectives ---------------------------------------------------------

std::vector<const unsigned char*> Pointers(const std::vector<std::vector<unsigned char>>& all,
                                           size_t offset) {
  std::vector<const unsigned char*> pointers;
  for (const auto& contribution : all) pointers.push_back(contribution.data() + offset);
  return pointers;
}

infiniCclResult_t AllReduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                            infiniCclRedOp_t op, infiniCclComm_t handle, infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const size_t bytes = count * WidthOf(datatype);
  std::vector<std::vector<unsigned char>> all;
  infiniCclResult_t result = Exchange(comm, sendbuff, bytes, bytes, Everyone, &all);
  if (result != infiniCclSuccess) return result;
  ReduceInto(datatype, op, Pointers(all, 0), count, recvbuff);
  if (Fault("wrong_all_reduce") && op == infiniCclSum && datatype.code == kDLFloat &&
      datatype.bits == 32 && count > 2) {
    static_cast<float*>(recvbuff)[2] += 1;
  }
  if (Fault("wrong_with_threads") && comm.several_in_process && op == infiniCclSum &&
      datatype.code == kDLFloat && datatype.bits == 32 && count > 0) {
    static_cast<float*>(recvbuff)[0] += 1;
  }
  return infiniCclSuccess;
}

infiniCclResult_t Reduce(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                         infiniCclRedOp_t op, int root, infiniCclComm_t handle, infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const size_t bytes = count * WidthOf(datatype);
  const bool is_root = comm.rank == root;
  std::vector<std::vector<unsigned char>> all;
  infiniCclResult_t result = Exchange(
      comm, sendbuff, bytes, bytes, [&](int) { return is_root; }, &all);
  if (result != infiniCclSuccess) return result;
  if (is_root) ReduceInto(datatype, op, Pointers(all, 0), count, recvbuff);
  return infiniCclSuccess;
}

infiniCclResult_t Broadcast(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                            int root, infiniCclComm_t handle, infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const size_t bytes = count * WidthOf(datatype);
  std::vector<std::vector<unsigned char>> all;
  if (Fault("hang_broadcast") && comm.rank == root) {
    ++comm.sequence;  // as if it had sent; the others wait for ever
    if (bytes != 0) std::memmove(recvbuff, sendbuff, bytes);
    return infiniCclSuccess;
  }
  infiniCclResult_t result = Exchange(
      comm, sendbuff, comm.rank == root ? bytes : 0, bytes, [&](int rank) { return rank == root; },
      &all);
  if (result != infiniCclSuccess) return result;
  if (bytes != 0) std::memmove(recvbuff, all[static_cast<size_t>(root)].data(), bytes);
  return infiniCclSuccess;
}

infiniCclResult_t AllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            DLDataType datatype, infiniCclComm_t handle, infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const size_t bytes = sendcount * WidthOf(datatype);
  std::vector<std::vector<unsigned char>> all;
  infiniCclResult_t result = Exchange(comm, sendbuff, bytes, bytes, Everyone, &all);
  if (result != infiniCclSuccess) return result;
  for (size_t rank = 0; rank < all.size() && bytes != 0; ++rank) {
    std::memcpy(static_cast<unsigned char*>(recvbuff) + rank * bytes, all[rank].data(), bytes);
  }
  return infiniCclSuccess;
}

infiniCclResult_t ReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                DLDataType datatype, infiniCclRedOp_t op, infiniCclComm_t handle,
                                infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const size_t bytes = recvcount * WidthOf(datatype) * static_cast<size_t>(comm.nranks);
  std::vector<std::vector<unsigned char>> all;
  infiniCclResult_t result = Exchange(comm, sendbuff, bytes, bytes, Everyone, &all);
  if (result != infiniCclSuccess) return result;
  const size_t offset = static_cast<size_t>(comm.rank) * recvcount * WidthOf(datatype);
  ReduceInto(datatype, op, Pointers(all, offset), recvcount, recvbuff);
  return infiniCclSuccess;
}

std::string P2pKey(int from, int to, uint64_t number) {
  return "p2p/" + std::to_string(from) + "-" + std::to_string(to) + "/" + std::to_string(number);
}

// The lowest rank whose next message to this rank is in the store, or
// `asked` when none is yet (recv_any_source).
int FirstWaitingPeer(const Comm& comm, int asked) {
  for (int peer = 0; peer < comm.nranks; ++peer) {
    if (peer == comm.rank) continue;
    const std::string key =
        comm.prefix + P2pKey(peer, comm.rank, comm.received[static_cast<size_t>(peer)]);
    size_t bytes = 0;
    unsigned char probe = 0;
    int found = 0;
    if (comm.bootstrap.try_get(comm.bootstrap.context, key.c_str(), &probe, 0, &bytes, &found) ==
            infiniCclSuccess &&
        found != 0) {
      return peer;
    }
  }
  return asked;
}

// Sends never block (a store set), so rings need no group.
infiniCclResult_t Send(const void* sendbuff, size_t count, DLDataType datatype, int peer,
                       infiniCclComm_t handle, infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const std::string key = P2pKey(comm.rank, peer, comm.sent[static_cast<size_t>(peer)]++);
  return Put(comm, key, sendbuff, count * WidthOf(datatype));
}

infiniCclResult_t Recv(void* recvbuff, size_t count, DLDataType datatype, int peer,
                       infiniCclComm_t handle, infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  // "recv_any_source": takes the first peer's message that is there, as a
  // library that matches receives by arrival would.
  if (Fault("recv_any_source")) peer = FirstWaitingPeer(comm, peer);
  const std::string key = P2pKey(peer, comm.rank, comm.received[static_cast<size_t>(peer)]++);
  const size_t bytes = count * WidthOf(datatype);
  std::vector<unsigned char> message(bytes);
  infiniCclResult_t result = Take(comm, key, message.data(), bytes);
  if (result != infiniCclSuccess) return result;
  if (bytes != 0) std::memcpy(recvbuff, message.data(), bytes);
  return Put(comm, key, "", 0);  // the only reader: free the message
}

infiniCclResult_t Gather(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                         int root, infiniCclComm_t handle, infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const size_t bytes = count * WidthOf(datatype);
  const bool is_root = comm.rank == root;
  std::vector<std::vector<unsigned char>> all;
  infiniCclResult_t result = Exchange(
      comm, sendbuff, bytes, bytes, [&](int) { return is_root; }, &all);
  if (result != infiniCclSuccess || !is_root) return result;
  for (size_t rank = 0; rank < all.size() && bytes != 0; ++rank) {
    std::memcpy(static_cast<unsigned char*>(recvbuff) + rank * bytes, all[rank].data(), bytes);
  }
  return infiniCclSuccess;
}

infiniCclResult_t Scatter(const void* sendbuff, void* recvbuff, size_t count, DLDataType datatype,
                          int root, infiniCclComm_t handle, infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const size_t bytes = count * WidthOf(datatype);
  const size_t total = bytes * static_cast<size_t>(comm.nranks);
  std::vector<std::vector<unsigned char>> all;
  infiniCclResult_t result = Exchange(
      comm, sendbuff, comm.rank == root ? total : 0, total, [&](int rank) { return rank == root; },
      &all);
  if (result != infiniCclSuccess) return result;
  if (bytes != 0) {
    std::memmove(recvbuff, all[static_cast<size_t>(root)].data() + comm.rank * bytes, bytes);
  }
  return infiniCclSuccess;
}

infiniCclResult_t AllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff,
                             const size_t* recvcounts, const size_t* rdispls, DLDataType datatype,
                             infiniCclComm_t handle, infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const size_t width = WidthOf(datatype);
  std::vector<std::vector<unsigned char>> all;
  // Peers' sizes differ: read each at its own size.
  const std::string call = CallKey(comm);
  ++comm.sequence;
  infiniCclResult_t result = Put(comm, RankKey(call, comm.rank), sendbuff, sendcount * width);
  std::vector<std::string> written;
  std::vector<unsigned char> block;
  for (int rank = 0; rank < comm.nranks && result == infiniCclSuccess; ++rank) {
    written.push_back(RankKey(call, rank));
    const size_t bytes = recvcounts[rank] * width;
    block.resize(bytes);
    if (rank == comm.rank) {
      if (bytes != 0) std::memcpy(block.data(), sendbuff, bytes);
    } else {
      result = Take(comm, RankKey(call, rank), block.data(), bytes);
    }
    if (result == infiniCclSuccess && bytes != 0) {
      std::memcpy(static_cast<unsigned char*>(recvbuff) + rdispls[rank] * width, block.data(),
                  bytes);
    }
  }
  if (result != infiniCclSuccess) return result;
  return Finish(comm, call, written);
}

infiniCclResult_t ReduceScatterV(const void* sendbuff, const size_t* sendcounts,
                                 const size_t* sdispls, void* recvbuff, size_t recvcount,
                                 DLDataType datatype, infiniCclRedOp_t op, infiniCclComm_t handle,
                                 infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const size_t width = WidthOf(datatype);
  size_t total = 0;
  for (int rank = 0; rank < comm.nranks; ++rank) {
    total = std::max(total, (sdispls[rank] + sendcounts[rank]) * width);
  }
  std::vector<std::vector<unsigned char>> all;
  infiniCclResult_t result = Exchange(comm, sendbuff, total, total, Everyone, &all);
  if (result != infiniCclSuccess) return result;
  ReduceInto(datatype, op, Pointers(all, sdispls[comm.rank] * width), recvcount, recvbuff);
  return infiniCclSuccess;
}

// Each rank sets one key per destination; each reads the ones addressed to it.
infiniCclResult_t AllToAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                            void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                            DLDataType datatype, infiniCclComm_t handle, infiniCclStream_t) {
  Comm& comm = *CommOf(handle);
  CommUse use(&comm);
  const size_t width = WidthOf(datatype);
  const std::string call = CallKey(comm);
  ++comm.sequence;
  const auto* send = static_cast<const unsigned char*>(sendbuff);
  auto block_key = [&](int from, int to) { return RankKey(call, from) + ">" + std::to_string(to); };
  std::vector<unsigned char> own;
  infiniCclResult_t result = infiniCclSuccess;
  for (int peer = 0; peer < comm.nranks && result == infiniCclSuccess; ++peer) {
    const unsigned char* block = send + sdispls[peer] * width;
    if (peer == comm.rank) {
      own.assign(block, block + sendcounts[peer] * width);
    } else {
      result = Put(comm, block_key(comm.rank, peer), block, sendcounts[peer] * width);
    }
  }
  std::vector<std::string> written;
  std::vector<unsigned char> block;
  for (int peer = 0; peer < comm.nranks && result == infiniCclSuccess; ++peer) {
    for (int to = 0; to < comm.nranks; ++to) {
      if (to != peer) written.push_back(block_key(peer, to));
    }
    const size_t bytes = recvcounts[peer] * width;
    if (peer == comm.rank) {
      block = own;
      if (block.size() != bytes) {
        return Fail(infiniCclInvalidArgument,
                    "all_to_all_v: this rank sends itself " + std::to_string(own.size() / width) +
                        " elements but receives " + std::to_string(recvcounts[peer]));
      }
    } else {
      block.resize(bytes);
      result = Take(comm, block_key(peer, comm.rank), block.data(), bytes);
    }
    if (result == infiniCclSuccess && bytes != 0) {
      std::memcpy(static_cast<unsigned char*>(recvbuff) + rdispls[peer] * width, block.data(),
                  bytes);
    }
  }
  if (result != infiniCclSuccess) return result;
  return Finish(comm, call, written);
}

}  // namespace

INFINI_CCL_PLUGIN_EXPORT const infiniCclPlugin_v2_t infiniCclPlugin_v2 = {
    .struct_size = sizeof(infiniCclPlugin_v2_t),
    .abi_version = INFINI_CCL_PLUGIN_ABI_VERSION_V2,
    .name = kName,
    .get_version = GetVersion,
    .get_error_string = GetErrorString,
    .get_last_error = GetLastError,
    // Not CONCURRENT_INIT (the host must use comm_init_ranks), not
    // NONBLOCKING; waits poll, so an abort ends them.
    .features = INFINI_CCL_FEATURE_ABORT_UNBLOCKS
#ifdef KVTEST_ONE_RANK_PER_PROCESS
                | INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS
#endif
    ,
    .supports = Supports,
    .device_type = kDLExtDev,
    .device_vendor = "InfiniCCL tests",
    .device_kind = "KV",
    .visible_devices_env = "KVTEST_VISIBLE_DEVICES",
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
    .unique_id_bytes = kUniqueIdBytes,
    .get_unique_id = GetUniqueId,
    .comm_init_rank = nullptr,
    .comm_init_ranks = CommInitRanks,
    .comm_split = CommSplit,
    .comm_destroy = CommDestroy,
    .comm_abort = CommAbort,
    .comm_get_async_error = CommGetAsyncError,
    .comm_count = CommCount,
    .comm_user_rank = CommUserRank,
    .group_start = nullptr,
    .group_end = nullptr,
    .all_reduce = AllReduce,
    .broadcast = Broadcast,
    .reduce = Reduce,
    .all_gather = AllGather,
    .reduce_scatter = ReduceScatter,
    .send = Send,
    .recv = Recv,
    .all_to_all = nullptr,
    .barrier = nullptr,
    .all_to_all_v = AllToAllV,
    .all_gather_v = AllGatherV,
    .reduce_scatter_v = ReduceScatterV,
    .gather = Gather,
    .scatter = Scatter,
    .stream_begin_capture = nullptr,
    .stream_end_capture = nullptr,
    .graph_launch = nullptr,
    .graph_destroy = nullptr,
    .init = Init,
    .comm_shrink = CommShrink,
    .comm_revoke = CommRevoke,
    .comm_register = CommRegister,
    .comm_deregister = CommDeregister,
    .comm_window_register = CommWindowRegister,
    .comm_window_deregister = CommDeregister,
    .get_link_bandwidth = nullptr,
    .host_register = nullptr,
    .host_unregister = nullptr,
    .host_flag_create = nullptr,
    .host_flag_destroy = nullptr,
    .stream_wait_host_flag = nullptr,
    .stream_write_host_flag = nullptr,
};
