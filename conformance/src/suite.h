// The items of ccl_conformance and what each rank thread needs to run them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/conformance/run_store.h"
#include "infini/rendezvous/store.h"

namespace infini::conformance {

// Worst last: the verdict of an item over ranks is the worst of any rank's.
enum class Verdict { kPass = 0, kUnsupported = 1, kMissing = 2, kFail = 3 };
std::string_view VerdictName(Verdict verdict);  // "pass", "unsupported", "missing", "FAIL"

struct Outcome {
  Verdict verdict = Verdict::kPass;
  std::string detail;
  // The world communicator may be unusable after this item (an error in a
  // collective, a hang that was aborted): every rank makes a new one.
  bool rebuild_world = false;
};

struct SuiteOptions {
  // Every type at these counts (0, 1, odd, prime, not a multiple of any
  // vector width); at the count past `large_bytes` every type, or (quick)
  // float32 alone; float32
  // also at `largest_float32_count` (past every eager/rendezvous or
  // chunking threshold a vendor may have).
  std::vector<int64_t> counts;
  int64_t large_bytes = 1 << 20;
  bool large_for_every_type = true;
  // Rooted collectives are judged at every root up to this count, at the
  // last rank above it (large messages cost).
  int64_t every_root_up_to = 1031;
  int64_t largest_float32_count = 0;
  std::chrono::milliseconds item_timeout{60'000};
};

// The element counts a collective on `dtype` is judged at.
std::vector<int64_t> CountsFor(const SuiteOptions& options, DLDataType dtype);

// The rank threads of one process meeting: a barrier, and one thread making
// communicators for all (multi-device init).
class ThreadMeeting {
 public:
  explicit ThreadMeeting(int threads) : threads_(threads) {}
  // Returns false when not every thread arrived within `timeout`.
  bool Arrive(std::chrono::milliseconds timeout);
  // Thread 0 calls `make` (one communicator per thread rank); every thread
  // gets its own. Rethrows make's exception on every thread.
  ccl::Communicator OnePerThread(int thread_rank,
                                 const std::function<std::vector<ccl::Communicator>()>& make,
                                 std::chrono::milliseconds timeout);

 private:
  int threads_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
  std::vector<ccl::Communicator> made_;
  std::exception_ptr failure_;
};

// A rank thread's deadline, watched by the process's watchdog: when it
// passes, the watchdog aborts the communicators registered here so that a
// blocked call returns.
class HangWatch {
 public:
  void Arm(std::chrono::steady_clock::time_point deadline);
  void Disarm();  // also forgets every registered communicator
  void Add(ccl::Communicator* comm);
  void Remove(ccl::Communicator* comm);
  bool fired() const;
  // Called by the watchdog: fires when the deadline passed. Returns how long
  // ago it fired (zero when it has not).
  std::chrono::milliseconds Check(std::chrono::steady_clock::time_point now);

 private:
  mutable std::mutex mutex_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::optional<std::chrono::steady_clock::time_point> fired_at_;
  std::vector<ccl::Communicator*> comms_;
};

// Registers a communicator with a watch for one scope.
class Watched {
 public:
  Watched(HangWatch& watch, ccl::Communicator& comm) : watch_(watch), comm_(comm) {
    watch_.Add(&comm_);
  }
  ~Watched() { watch_.Remove(&comm_); }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

 private:
  HangWatch& watch_;
  ccl::Communicator& comm_;
};

// One rank thread's view.
struct RankContext {
  std::shared_ptr<const ccl::Backend> backend;
  int rank = 0;  // global
  int world_size = 1;
  int thread_rank = 0;
  int threads = 1;
  int device = 0;
  std::string device_problem;  // why the device could not be selected, or ""
  const RunStore* run_store = nullptr;
  std::shared_ptr<rendezvous::Store> store;  // this thread's own connection
  ThreadMeeting* meeting = nullptr;
  HangWatch* watch = nullptr;
  SuiteOptions options;

  ccl::Communicator world;
  std::string world_problem;  // why there is no world communicator
  int world_generation = 0;
  ccl::Stream stream;
  std::string item_key;  // store keys of the running item: "item/<n>"

  const ccl::Capabilities& capabilities() const { return backend->capabilities(); }
  // Makes this rank's device current on the calling thread.
  void ActivateDevice() const;
  // Global rank 0's new unique id, shared through the store under `key`
  // (rank 0's failure is rethrown on every rank).
  ccl::UniqueId ShareUniqueId(const std::string& key,
                              std::shared_ptr<ccl::BootstrapStore> bootstrap);
  // A new communicator of every rank (collective over all ranks): an id from
  // global rank 0 through the store under `key`, this process's ranks made
  // as the plugin prefers (concurrent comm_init_rank, or one
  // comm_init_ranks), with the run's store lent as bootstrap.
  ccl::Communicator NewCommunicator(const std::string& key, const ccl::CommConfig& config = {});
  // NewCommunicator's second half, for an id already shared; `nranks`
  // (default: world_size) counts ranks outside the suite too.
  ccl::Communicator NewCommunicatorOnePerThread(const std::string& key, const ccl::UniqueId& id,
                                                const ccl::CommConfig& config,
                                                std::shared_ptr<ccl::BootstrapStore> bootstrap,
                                                int nranks = 0);
};

struct Item {
  std::string name;
  bool needs_world = true;
  std::function<Outcome(RankContext&)> run;
  bool makes_world = false;  // init/world: the rank makes the world first
  // False when the backend declares it cannot serve the item (then `run`
  // only says why): AgreeOnItems compares it across processes.
  bool declared = true;
};

// Every item, in the order every rank runs them (the same list on every
// rank: it depends only on the backend's declarations and the layout).
// A layout the plugin declares it cannot serve (several ranks per process
// on a one-rank-per-process library) makes every communicator item
// unsupported, saying why, and no communicator is made.
// `spare_device`: a device no rank uses (or host buffers), for the process
// failure/peer_killed starts and kills.
std::vector<Item> BuildItems(const ccl::Capabilities& capabilities, int world_size,
                             int threads_per_process, bool spare_device);

// A mixed job (processes on different device backends staged through one
// transport) may declare different items: each process publishes which of
// `items` its backend declares under `key` of `store`, and an item that any
// process does not declare becomes unsupported on every process (naming the
// first such process), so every rank runs the same items. A different list
// of items is one std::runtime_error naming both processes' backends.
// Returns each process's backend name, in process order.
std::vector<std::string> AgreeOnItems(std::vector<Item>& items, rendezvous::Store& store,
                                      const std::string& key, int process, int processes,
                                      const std::string& backend_name);

}  // namespace infini::conformance
