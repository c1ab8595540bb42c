// The liar: a plugin that forwards every entry to the real gloo plugin and
// lies in one way, named by INFINI_CCL_LIE, the way a buggy vendor plugin
// does. The conformance suite's own tests (mutants_test.cc) require each lie
// to be caught (a FAIL) in every layout where it can show; a lie that a
// future hole lets through becomes a new entry of kLies.
//
// Test-only: never installed. The real plugin's path is compiled in
// (LIAR_REAL_PLUGIN), so the liar needs nothing of ours at run time.
#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "infini/ccl/plugin_abi.h"

namespace {

infiniCclPlugin_v2_t g_real{};

std::string_view Lie() {
  static const std::string lie = [] {
    const char* value = std::getenv("INFINI_CCL_LIE");
    return std::string(value != nullptr ? value : "");
  }();
  return lie;
}
bool Lying(std::string_view name) { return Lie() == name; }

size_t Width(DLDataType dtype) { return (static_cast<size_t>(dtype.bits) * dtype.lanes + 7) / 8; }
bool Is(DLDataType dtype, uint8_t code, uint8_t bits) {
  return dtype.code == code && dtype.bits == bits && dtype.lanes == 1;
}
void FlipElement(void* buffer, size_t index, size_t width) {
  auto* bytes = static_cast<unsigned char*>(buffer) + index * width;
  for (size_t byte = 0; byte < width; ++byte)
    bytes[byte] = static_cast<unsigned char>(~bytes[byte]);
}

// ---- early_event: collectives run later, on a worker per communicator ----

class Worker {
 public:
  Worker() : thread_([this] { Loop(); }) { thread_.detach(); }
  void Post(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    changed_.notify_all();
  }
  void Drain() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return tasks_.empty() && !busy_; });
  }

 private:
  void Loop() {
    std::unique_lock lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] { return !tasks_.empty(); });
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      busy_ = true;
      lock.unlock();
      task();
      lock.lock();
      busy_ = false;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false;
  std::thread thread_;
};

// Never destroyed: a worker may still be in a call when the process exits.
std::mutex g_workers_mutex;
auto* g_workers = new std::map<infiniCclComm_t, Worker*>;
// The workers of the communicators this thread posted to: a thread waits
// for its own work only (another rank thread's worker may need this
// thread's next post to finish).
thread_local std::set<Worker*> t_my_workers;

Worker& WorkerOf(infiniCclComm_t comm) {
  std::lock_guard lock(g_workers_mutex);
  Worker*& worker = (*g_workers)[comm];
  if (worker == nullptr) worker = new Worker;
  t_my_workers.insert(worker);
  return *worker;
}
void DrainAll() {
  for (Worker* worker : t_my_workers) worker->Drain();
}

// ---- abort_hides_error: which communicators were aborted ----------------

std::mutex g_aborted_mutex;
std::set<infiniCclComm_t> g_aborted;
bool Aborted(infiniCclComm_t comm) {
  std::lock_guard lock(g_aborted_mutex);
  return g_aborted.count(comm) != 0;
}

// ---- The entries that lie ------------------------------------------------

infiniCclResult_t AllReduce(const void* send, void* recv, size_t count, DLDataType dtype,
                            infiniCclRedOp_t op, infiniCclComm_t comm, infiniCclStream_t stream) {
  const bool in_place = send == recv;
  const size_t width = Width(dtype);
  if (Lying("unwritten_output") && !in_place) return infiniCclSuccess;
  if (Lying("in_place_ignored") && in_place) return infiniCclSuccess;
  if (Lying("avg_as_sum") && op == infiniCclAvg) op = infiniCclSum;
  if (Lying("odd_count_short") && count % 2 == 1) --count;
  if (Lying("crash_on_bfloat16") && Is(dtype, kDLBfloat, 16) && op == infiniCclSum) {
    std::raise(SIGSEGV);
  }
  if (Lying("early_event")) {
    WorkerOf(comm).Post([=] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      g_real.all_reduce(send, recv, count, dtype, op, comm, stream);
    });
    return infiniCclSuccess;
  }
  const infiniCclResult_t result = g_real.all_reduce(send, recv, count, dtype, op, comm, stream);
  if (result != infiniCclSuccess || count == 0) return result;
  if (Lying("large_message_corrupt") && count * width > (size_t{1} << 20)) {
    FlipElement(recv, (size_t{1} << 20) / width, width);
  }
  if (Lying("bf16_max_ulp") && op == infiniCclMax && Is(dtype, kDLBfloat, 16)) {
    uint16_t bits;
    std::memcpy(&bits, recv, 2);
    ++bits;
    std::memcpy(recv, &bits, 2);
  }
  if (Lying("fp32_sum_in_bf16") && op == infiniCclSum && Is(dtype, kDLFloat, 32)) {
    auto* values = static_cast<float*>(recv);
    for (size_t index = 0; index < count; ++index) {  // keep bfloat16's 8 bits of precision
      uint32_t bits;
      std::memcpy(&bits, &values[index], 4);
      bits = (bits + 0x8000u) & 0xffff0000u;
      std::memcpy(&values[index], &bits, 4);
    }
  }
  if (Lying("write_past_end")) {
    std::memcpy(static_cast<unsigned char*>(recv) + count * width, recv, width);
  }
  if (Lying("send_modified") && !in_place) FlipElement(const_cast<void*>(send), 0, width);
  return result;
}

infiniCclResult_t AllGather(const void* send, void* recv, size_t count, DLDataType dtype,
                            infiniCclComm_t comm, infiniCclStream_t stream) {
  const infiniCclResult_t result = g_real.all_gather(send, recv, count, dtype, comm, stream);
  int nranks = 0;
  if (result != infiniCclSuccess || !Lying("all_gather_reversed") ||
      g_real.comm_count(comm, &nranks) != infiniCclSuccess) {
    return result;
  }
  const size_t block = count * Width(dtype);
  auto* bytes = static_cast<unsigned char*>(recv);
  for (int low = 0, high = nranks - 1; low < high; ++low, --high) {
    std::swap_ranges(bytes + low * block, bytes + (low + 1) * block, bytes + high * block);
  }
  return result;
}

infiniCclResult_t Broadcast(const void* send, void* recv, size_t count, DLDataType dtype, int root,
                            infiniCclComm_t comm, infiniCclStream_t stream) {
  int nranks = 0;
  if (Lying("broadcast_root_zero") && root == 0 &&
      g_real.comm_count(comm, &nranks) == infiniCclSuccess) {
    root = nranks - 1;
  }
  return g_real.broadcast(send, recv, count, dtype, root, comm, stream);
}

infiniCclResult_t Reduce(const void* send, void* recv, size_t count, DLDataType dtype,
                         infiniCclRedOp_t op, int root, infiniCclComm_t comm,
                         infiniCclStream_t stream) {
  const infiniCclResult_t result = g_real.reduce(send, recv, count, dtype, op, root, comm, stream);
  int rank = 0;
  if (result == infiniCclSuccess && Lying("reduce_off_by_one_at_root_zero") && root == 0 &&
      count > 0 && g_real.comm_user_rank(comm, &rank) == infiniCclSuccess && rank == 0) {
    FlipElement(recv, count - 1, Width(dtype));
  }
  return result;
}

infiniCclResult_t Recv(void* recv, size_t count, DLDataType dtype, int peer, infiniCclComm_t comm,
                       infiniCclStream_t stream) {
  const infiniCclResult_t result = g_real.recv(recv, count, dtype, peer, comm, stream);
  if (result != infiniCclSuccess && Lying("abort_hides_error") && Aborted(comm)) {
    return infiniCclSuccess;
  }
  return result;
}

infiniCclResult_t CommAbort(infiniCclComm_t comm) {
  {
    std::lock_guard lock(g_aborted_mutex);
    g_aborted.insert(comm);
  }
  return g_real.comm_abort(comm);
}

infiniCclResult_t CommGetAsyncError(infiniCclComm_t comm, infiniCclResult_t* async_error,
                                    const char** message) {
  const infiniCclResult_t result = g_real.comm_get_async_error(comm, async_error, message);
  if (Lying("async_error_silent") && result == infiniCclSuccess) *async_error = infiniCclSuccess;
  return result;
}

infiniCclResult_t CommSplit(infiniCclComm_t comm, int color, int key, infiniCclComm_t* new_comm,
                            const infiniCclConfig_t* config) {
  if (Lying("split_ignores_key")) key = 0;
  return g_real.comm_split(comm, color, key, new_comm, config);
}

infiniCclResult_t StreamSynchronize(infiniCclStream_t stream) {
  if (Lying("early_event")) DrainAll();
  return g_real.stream_synchronize(stream);
}

infiniCclResult_t EventQuery(infiniCclEvent_t event, int* done) {
  if (Lying("early_event")) {
    *done = 1;  // the lie: whatever is still queued
    return infiniCclSuccess;
  }
  return g_real.event_query(event, done);
}

infiniCclResult_t MemFree(void* pointer) {
  if (Lying("early_event")) DrainAll();  // as a device's free waits for its work
  return g_real.mem_free(pointer);
}

infiniCclResult_t CommDestroy(infiniCclComm_t comm) {
  if (Lying("early_event")) DrainAll();
  return g_real.comm_destroy(comm);
}

}  // namespace

// Not const, unlike a real plugin's table: filled at load time from gloo's.
extern "C" {
__attribute__((visibility("default"))) infiniCclPlugin_v2_t infiniCclPlugin_v2;
}

// Fills the exported table before the host reads it (dlopen runs this).
__attribute__((constructor)) static void LoadTheRealPlugin() {
  void* library = dlopen(LIAR_REAL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  const auto* real =
      library != nullptr
          ? static_cast<const infiniCclPlugin_v2_t*>(dlsym(library, INFINI_CCL_PLUGIN_SYMBOL_V2))
          : nullptr;
  if (real == nullptr) {
    std::fprintf(stderr, "liar plugin: cannot load %s: %s\n", LIAR_REAL_PLUGIN, dlerror());
    return;  // the table stays empty: the host refuses it in one line
  }
  g_real = *real;
  infiniCclPlugin_v2 = *real;
  infiniCclPlugin_v2.name = "liar";
  infiniCclPlugin_v2.all_reduce = AllReduce;
  infiniCclPlugin_v2.all_gather = AllGather;
  infiniCclPlugin_v2.broadcast = Broadcast;
  infiniCclPlugin_v2.reduce = Reduce;
  infiniCclPlugin_v2.recv = Recv;
  infiniCclPlugin_v2.comm_abort = CommAbort;
  infiniCclPlugin_v2.comm_get_async_error = CommGetAsyncError;
  infiniCclPlugin_v2.comm_split = CommSplit;
  infiniCclPlugin_v2.stream_synchronize = StreamSynchronize;
  infiniCclPlugin_v2.event_query = EventQuery;
  infiniCclPlugin_v2.event_synchronize = [](infiniCclEvent_t event) {
    return Lying("early_event") ? infiniCclSuccess : g_real.event_synchronize(event);
  };
  infiniCclPlugin_v2.mem_free = MemFree;
  infiniCclPlugin_v2.comm_destroy = CommDestroy;
}
