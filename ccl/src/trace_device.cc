// Device spans (trace_device.h): per plugin and device, a pool of timing
// events and the current anchor; the recorder's thread reads and releases.
#include "trace_device.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "infini/ccl/trace.h"
#include "infini/common/trace_format.h"

namespace infini::ccl::internal {

// An event recorded on the pool's idle stream at host time host_ns: device
// time t maps to host_ns + (t - the anchor's device time).
struct DeviceAnchor {
  DevicePool* pool = nullptr;
  infiniCclEvent_t event = nullptr;
  int64_t host_ns = 0;
  ~DeviceAnchor();
};

struct DevicePool {
  const infiniCclPlugin_t* plugin = nullptr;
  infiniCclStream_t anchor_stream = nullptr;  // never destroyed: one per device
  std::mutex mutex;                           // guards free_events and anchor
  std::vector<infiniCclEvent_t> free_events;
  std::shared_ptr<DeviceAnchor> anchor;

  infiniCclEvent_t Take() {
    {
      std::lock_guard lock(mutex);
      if (!free_events.empty()) {
        infiniCclEvent_t event = free_events.back();
        free_events.pop_back();
        return event;
      }
    }
    infiniCclEvent_t event = nullptr;
    return plugin->event_create(&event) == infiniCclSuccess ? event : nullptr;
  }
  void Give(infiniCclEvent_t event) {
    if (event == nullptr) return;
    std::lock_guard lock(mutex);
    free_events.push_back(event);
  }
};

DeviceAnchor::~DeviceAnchor() { pool->Give(event); }

namespace {

// A newer anchor now and then keeps the float milliseconds between an
// anchor and an event fine (24 bits: ~60 ns at 1 s) and follows any drift
// of the device's clock against the host's.
constexpr int64_t kAnchorRenewNs = 1'000'000'000;
// Samples in flight at most: beyond, calls go unsampled until some are read.
constexpr int kMostSamplesInFlight = 16384;

std::atomic<int> g_in_flight{0};
std::atomic<uint64_t> g_eligible_calls{0};

// INFINI_CCL_TRACE_DEVICE_EVERY, read once at load when tracing is on: a
// bad value is the user's mistake, one line and exit 2.
constexpr int kUnset = -1;
const int g_every_variable = [] {
  const char* folder = std::getenv(trace_format::kTraceDirVariable);
  const char* text = std::getenv(trace_format::kDeviceEveryVariable);
  if (folder == nullptr || *folder == '\0' || text == nullptr || *text == '\0') return kUnset;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 1'000'000'000) {
    const std::string line = std::string("infini_ccl: error: ") +
                             trace_format::kDeviceEveryVariable + "='" + text +
                             "': expected a whole number >= 0 (time the device span of every "
                             "N-th collective; 0: none)\n";
    (void)!write(STDERR_FILENO, line.data(), line.size());
    std::_Exit(2);
  }
  return static_cast<int>(value);
}();

std::mutex g_pools_mutex;
std::map<std::pair<const infiniCclPlugin_t*, int>, DevicePool*> g_pools;  // never freed

DevicePool* PoolOf(const TraceStream& where) {
  std::lock_guard lock(g_pools_mutex);
  DevicePool*& pool = g_pools[{where.plugin, where.device}];
  if (pool == nullptr) {
    infiniCclStream_t stream = nullptr;
    if (where.plugin->stream_create(&stream) != infiniCclSuccess) return nullptr;
    pool = new DevicePool();
    pool->plugin = where.plugin;
    pool->anchor_stream = stream;
  }
  return pool;
}

// The pool's anchor, a new one when the current is old.
std::shared_ptr<DeviceAnchor> AnchorOf(DevicePool& pool) {
  const int64_t now = trace::NowNs();
  {
    std::lock_guard lock(pool.mutex);
    if (pool.anchor != nullptr && now - pool.anchor->host_ns < kAnchorRenewNs) return pool.anchor;
  }
  auto anchor = std::make_shared<DeviceAnchor>();
  anchor->pool = &pool;
  anchor->event = pool.Take();
  if (anchor->event == nullptr) return nullptr;
  // The stream has nothing else: the event completes as it is enqueued, a
  // launch latency (µs) after the host time read once the record returns.
  if (pool.plugin->event_record(anchor->event, pool.anchor_stream) != infiniCclSuccess) {
    return nullptr;
  }
  anchor->host_ns = trace::NowNs();
  std::shared_ptr<DeviceAnchor> previous;
  {
    std::lock_guard lock(pool.mutex);
    previous = std::exchange(pool.anchor, anchor);
  }
  // Released outside the lock: the last owner's destructor gives its event
  // back to this pool, which takes the same mutex.
  previous.reset();
  return anchor;
}

}  // namespace

// Unset on a device backend: one call in 16. A sampled call costs two event
// records, +5.7 us of host time on an H200 (nccl_overhead_bench, 8 B
// all-reduce, 11.8 against 6.1 us a call): 1 in 16 keeps the average within
// the 1 us a traced call may add.
constexpr int kDefaultDeviceEvery = 16;

int DeviceSampleEvery(bool host_backend) {
  if (g_every_variable != kUnset) return g_every_variable;
  return host_backend ? 0 : kDefaultDeviceEvery;
}

std::unique_ptr<DeviceSample> StartDeviceSample(const TraceStream& where) {
  const int every = DeviceSampleEvery(where.host_backend);
  if (every == 0 || where.group_open || where.plugin == nullptr) return nullptr;
  if (g_eligible_calls.fetch_add(1, std::memory_order_relaxed) % static_cast<uint64_t>(every) !=
      0) {
    return nullptr;
  }
  // Events are made on the calling thread's device: it must be the stream's.
  int current = -1;
  if (where.plugin->get_device(&current) != infiniCclSuccess || current != where.device) {
    return nullptr;
  }
  if (g_in_flight.fetch_add(1, std::memory_order_relaxed) >= kMostSamplesInFlight) {
    g_in_flight.fetch_sub(1, std::memory_order_relaxed);
    return nullptr;
  }
  auto sample = std::make_unique<DeviceSample>();
  sample->in_flight = true;
  sample->pool = PoolOf(where);
  if (sample->pool != nullptr) sample->anchor = AnchorOf(*sample->pool);
  if (sample->anchor != nullptr) sample->start = sample->pool->Take();
  if (sample->start == nullptr ||
      where.plugin->event_record(sample->start, where.stream) != infiniCclSuccess) {
    ReleaseDeviceSample(*sample);
    return nullptr;
  }
  return sample;
}

bool EndDeviceSample(DeviceSample& sample, infiniCclStream_t stream) {
  sample.end = sample.pool->Take();
  if (sample.end == nullptr ||
      sample.pool->plugin->event_record(sample.end, stream) != infiniCclSuccess) {
    ReleaseDeviceSample(sample);
    return false;
  }
  return true;
}

SampleState ReadDeviceSample(const DeviceSample& sample, int64_t* begin_ns, int64_t* end_ns) {
  const infiniCclPlugin_t& plugin = *sample.pool->plugin;
  // Both ends of each elapsed time must have completed (the anchor almost
  // always has: its stream is idle).
  for (infiniCclEvent_t event : {sample.end, sample.anchor->event}) {
    int done = 0;
    if (plugin.event_query(event, &done) != infiniCclSuccess) return SampleState::kUnreadable;
    if (done == 0) return SampleState::kPending;
  }
  float begin_ms = 0;
  float end_ms = 0;
  if (plugin.event_elapsed_ms(sample.anchor->event, sample.start, &begin_ms) != infiniCclSuccess ||
      plugin.event_elapsed_ms(sample.anchor->event, sample.end, &end_ms) != infiniCclSuccess ||
      end_ms < begin_ms) {
    return SampleState::kUnreadable;
  }
  *begin_ns = sample.anchor->host_ns + static_cast<int64_t>(static_cast<double>(begin_ms) * 1e6);
  *end_ns = sample.anchor->host_ns + static_cast<int64_t>(static_cast<double>(end_ms) * 1e6);
  return SampleState::kRead;
}

void AbandonDeviceSample(DeviceSample& sample) {
  sample.start = nullptr;
  sample.end = nullptr;
  ReleaseDeviceSample(sample);
}

void ReleaseDeviceSample(DeviceSample& sample) {
  if (sample.pool != nullptr) {
    sample.pool->Give(std::exchange(sample.start, nullptr));
    sample.pool->Give(std::exchange(sample.end, nullptr));
  }
  sample.anchor.reset();
  if (std::exchange(sample.in_flight, false)) g_in_flight.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace infini::ccl::internal
