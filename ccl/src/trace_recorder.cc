// The recorder: rings per global rank, the thread that drains them to
// rank<R>.jsonl (trace_format.h has the lines) and writes the metrics at
// exit, every 2 s and on SIGUSR1. A disk that fails stops one rank's file with one
// line on stderr; the run goes on.
#include "trace_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/ccl/dtype.h"
#include "infini/common/json_quoted.h"
#include "infini/common/launch_env.h"
#include "infini/common/trace_format.h"
#include "trace_metrics.h"

namespace infini::ccl {
namespace trace::detail {

// Decided once, at load: the variable is the launcher's (or the user's).
std::atomic<bool> g_enabled{[] {
  const char* folder = std::getenv(trace_format::kTraceDirVariable);
  return folder != nullptr && *folder != '\0';
}()};

}  // namespace trace::detail

namespace internal {
namespace {

// Events a rank's ring holds (INFINI_CCL_TRACE_RING_EVENTS): at ~100 bytes
// each, 3 MiB per rank; drained every kFlushInterval.
constexpr size_t kDefaultRingEvents = 32768;
constexpr std::chrono::milliseconds kFlushInterval{100};
constexpr int64_t kMetricsEveryFlushes = 20;  // every 2 s
// Fault events a rank holds between flushes; beyond, they count as dropped.
constexpr size_t kMaxFaultEvents = 1024;

std::atomic<bool> g_metrics_requested{false};

extern "C" void OnMetricsSignal(int) { g_metrics_requested.store(true); }

int EnvironmentInt(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value >= 0 ? static_cast<int>(value) : fallback;
}

struct ClockLine {
  int64_t offset_ns;
  int64_t rtt_ns;
  int rounds;
};

// A watchdog or recovery event: rare, so it carries its facts as text.
struct FaultEvent {
  TraceEvent event;
  std::string facts;  // a JSON object
};

struct RankTrace {
  explicit RankTrace(size_t capacity) : ring(capacity) {}

  // Shared with the calls.
  std::mutex mutex;
  std::vector<TraceEvent> ring;
  size_t head = 0;
  size_t size = 0;
  uint64_t dropped = 0;
  std::optional<ClockLine> clock;
  std::vector<FaultEvent> faults;

  // The recorder's thread only.
  int fd = -1;
  bool file_failed = false;
  uint64_t dropped_written = 0;
  TraceMetrics metrics;

  void Push(const TraceEvent& event) {
    std::lock_guard lock(mutex);
    if (size == ring.size()) {  // full: the oldest goes
      ring[head] = event;
      head = (head + 1) % ring.size();
      ++dropped;
      return;
    }
    ring[(head + size) % ring.size()] = event;
    ++size;
  }

  void PushFault(FaultEvent fault) {
    std::lock_guard lock(mutex);
    if (faults.size() == kMaxFaultEvents) {
      ++dropped;
      return;
    }
    faults.push_back(std::move(fault));
  }
};

struct CommunicatorLabel {
  const std::string* group = nullptr;
  int global_rank = -1;
  int64_t next_seq = 0;
};

class Recorder {
 public:
  static Recorder& Get() {
    // Never destroyed: calls from other threads may outlive static
    // destruction; Close (at exit) writes what is left.
    static Recorder* recorder = new Recorder();
    return *recorder;
  }

  RankTrace& Rank(int global_rank) {
    std::lock_guard lock(mutex_);
    return RankLocked(global_rank);
  }

  void Call(const CallSpan& span, int64_t end_ns, std::unique_ptr<DeviceSample> device) {
    TraceEvent event;
    event.category = trace::Category::kCcl;
    event.collective = static_cast<int8_t>(span.collective);
    event.name = CollectiveName(span.collective).data();
    event.dtype = span.dtype;
    event.count = static_cast<int64_t>(span.count);
    event.bytes = span.elements * ElementBytes(span.dtype);
    event.world = span.world;
    event.begin_ns = span.begin_ns;
    event.end_ns = end_ns;
    RankTrace* rank = nullptr;
    {
      std::lock_guard lock(mutex_);
      CommunicatorLabel& label = labels_[span.handle];
      event.group = label.group;
      event.seq = label.next_seq++;
      const int global_rank = label.global_rank >= 0 ? label.global_rank
                              : process_rank_ >= 0   ? process_rank_
                                                     : span.communicator_rank;
      rank = &RankLocked(global_rank);
      if (device != nullptr) {
        TraceEvent device_span = event;
        device_span.category = trace::Category::kDevice;
        device_span.collective = -1;
        pending_.push_back({std::move(device), global_rank, device_span});
      }
    }
    rank->Push(event);
  }

  void Plugin(const PluginSpan& span) {
    TraceEvent event;
    event.category = trace::Category::kPlugin;
    event.bytes = span.bytes;
    event.channels = span.channels;
    event.begin_ns = span.begin_ns;
    event.end_ns = span.end_ns;
    RankTrace* rank = nullptr;
    {
      std::lock_guard lock(mutex_);
      event.name = InternLocked(span.name)->c_str();
      if (span.algorithm != nullptr) event.algorithm = InternLocked(span.algorithm);
      if (span.protocol != nullptr) event.protocol = InternLocked(span.protocol);
      const CommunicatorLabel& label = labels_[span.handle];
      event.group = label.group;
      event.seq = span.seq >= 0 ? span.seq : label.next_seq;
      rank = &RankLocked(label.global_rank >= 0 ? label.global_rank
                         : process_rank_ >= 0   ? process_rank_
                                                : 0);
    }
    rank->Push(event);
  }

  void Label(const void* handle, std::string_view group, int global_rank) {
    std::lock_guard lock(mutex_);
    CommunicatorLabel& label = labels_[handle];
    label.group = InternLocked(group);
    label.global_rank = global_rank;
  }

  void Forget(const void* handle) {
    std::lock_guard lock(mutex_);
    labels_.erase(handle);
  }

  void FlushFromCaller() { FlushAll(true, false); }

  const std::string* Intern(std::string_view text) {
    std::lock_guard lock(mutex_);
    return InternLocked(text);
  }

 private:
  Recorder()
      : folder_(std::getenv(trace_format::kTraceDirVariable)),
        ring_events_(static_cast<size_t>(
            EnvironmentInt("INFINI_CCL_TRACE_RING_EVENTS", kDefaultRingEvents))),
        process_rank_(EnvironmentInt(env::torchrun::kRank, -1)),
        owner_pid_(getpid()) {
    if (ring_events_ == 0) ring_events_ = 1;
    // SIGUSR1 writes the metrics, unless the program handles it itself.
    struct sigaction current {};
    if (sigaction(SIGUSR1, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction action {};
      action.sa_handler = OnMetricsSignal;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESTART;
      sigaction(SIGUSR1, &action, nullptr);
    }
    thread_ = std::thread([this] { Loop(); });
    std::atexit([] { Get().Close(); });
  }

  RankTrace& RankLocked(int global_rank) {
    auto& rank = ranks_[global_rank];
    if (rank == nullptr) rank = std::make_unique<RankTrace>(ring_events_);
    return *rank;
  }

  const std::string* InternLocked(std::string_view text) {
    for (const std::string& name : names_) {
      if (name == text) return &name;
    }
    return &names_.emplace_back(text);
  }

  void Loop() {
    std::unique_lock lock(stop_mutex_);
    for (int64_t tick = 1; !stopping_; ++tick) {
      stop_changed_.wait_for(lock, kFlushInterval);
      lock.unlock();
      // Also now and then: a rank killed later still leaves its metrics.
      FlushAll(g_metrics_requested.exchange(false) || tick % kMetricsEveryFlushes == 0, false);
      lock.lock();
    }
  }

  void Close() {
    // A forked child has the rings but not the thread: its parent writes.
    if (getpid() != owner_pid_) return;
    {
      std::lock_guard lock(stop_mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    stop_changed_.notify_all();
    if (thread_.joinable()) thread_.join();
    FlushAll(true, true);
  }

  // The device spans whose events have completed go to their ranks' rings;
  // at the end, those not done yet are dropped.
  void CollectDeviceSpans(bool closing) {
    std::vector<PendingDevice> pending;
    {
      std::lock_guard lock(mutex_);
      pending.swap(pending_);
    }
    std::vector<PendingDevice> waiting;
    for (PendingDevice& entry : pending) {
      const SampleState state =
          ReadDeviceSample(*entry.sample, &entry.span.begin_ns, &entry.span.end_ns);
      if (state == SampleState::kPending && !closing) {
        waiting.push_back(std::move(entry));
        continue;
      }
      if (state == SampleState::kUnreadable) {
        AbandonDeviceSample(*entry.sample);
        continue;
      }
      if (state == SampleState::kRead) Rank(entry.global_rank).Push(entry.span);
      ReleaseDeviceSample(*entry.sample);
    }
    std::lock_guard lock(mutex_);
    pending_.insert(pending_.begin(), std::make_move_iterator(waiting.begin()),
                    std::make_move_iterator(waiting.end()));
  }

  void FlushAll(bool write_metrics, bool closing) {
    // The recorder's thread, the exit and the watchdog's FlushNow.
    std::lock_guard flushing(flush_mutex_);
    CollectDeviceSpans(closing);
    std::vector<std::pair<int, RankTrace*>> ranks;
    {
      std::lock_guard lock(mutex_);
      for (auto& [global_rank, rank] : ranks_) ranks.emplace_back(global_rank, rank.get());
    }
    for (auto& [global_rank, rank] : ranks) {
      Flush(global_rank, *rank, closing);
      if (write_metrics) WriteMetrics(global_rank, *rank);
    }
  }

  void Flush(int global_rank, RankTrace& rank, bool closing) {
    std::vector<TraceEvent> events;
    std::vector<FaultEvent> faults;
    std::optional<ClockLine> clock;
    uint64_t dropped = 0;
    {
      std::lock_guard lock(rank.mutex);
      faults.swap(rank.faults);
      events.reserve(rank.size);
      for (size_t i = 0; i < rank.size; ++i) {
        events.push_back(rank.ring[(rank.head + i) % rank.ring.size()]);
      }
      rank.head = rank.size = 0;
      clock = std::exchange(rank.clock, std::nullopt);
      dropped = rank.dropped;
    }
    for (const TraceEvent& event : events) rank.metrics.Add(event);
    std::string text;
    if (clock) {
      text += "{\"kind\":\"clock\",\"offset_ns\":" + std::to_string(clock->offset_ns) +
              ",\"rtt_ns\":" + std::to_string(clock->rtt_ns) +
              ",\"rounds\":" + std::to_string(clock->rounds) + "}\n";
    }
    for (const TraceEvent& event : events) text += EventLine(event);
    for (const FaultEvent& fault : faults) text += EventLine(fault.event, &fault.facts);
    if (dropped > rank.dropped_written) {
      text += "{\"kind\":\"dropped\",\"count\":" + std::to_string(dropped - rank.dropped_written) +
              "}\n";
      rank.dropped_written = dropped;
    }
    if (closing) text += "{\"kind\":\"end\"}\n";
    if (!text.empty()) Write(global_rank, rank, text);
  }

  // `facts`: a fault event's (a JSON object), else nullptr.
  static std::string EventLine(const TraceEvent& event, const std::string* facts = nullptr) {
    static constexpr const char* kCategories[] = {
        trace_format::kCategoryCcl,      trace_format::kCategoryGroup,
        trace_format::kCategoryWait,     trace_format::kCategoryBucket,
        trace_format::kCategoryDevice,   trace_format::kCategoryPlugin,
        trace_format::kCategoryWatchdog, trace_format::kCategoryRecovery};
    std::string line = "{\"kind\":\"op\",\"cat\":\"";
    line += kCategories[static_cast<int>(event.category)];
    line += "\",\"name\":\"";
    line += event.name;
    line += "\",\"group\":" + JsonQuoted(event.group != nullptr ? *event.group : "") +
            ",\"seq\":" + std::to_string(event.seq);
    if (event.category == trace::Category::kCcl) {
      line += ",\"dtype\":" + JsonQuoted(DataTypeName(event.dtype)) +
              ",\"count\":" + std::to_string(event.count) +
              ",\"world\":" + std::to_string(event.world);
    }
    if (event.algorithm != nullptr) line += ",\"algorithm\":" + JsonQuoted(*event.algorithm);
    if (event.protocol != nullptr) line += ",\"protocol\":" + JsonQuoted(*event.protocol);
    if (event.channels >= 0) line += ",\"channels\":" + std::to_string(event.channels);
    if (facts != nullptr) {
      if (event.begin_ns == event.end_ns) line += ",\"instant\":1";
      line += ",\"facts\":" + JsonQuoted(*facts);
    }
    line += ",\"bytes\":" + std::to_string(event.bytes) +
            ",\"begin_ns\":" + std::to_string(event.begin_ns) +
            ",\"end_ns\":" + std::to_string(event.end_ns) + "}\n";
    return line;
  }

  std::string PathOf(const std::string& name) const { return folder_ + "/" + name; }

  void Write(int global_rank, RankTrace& rank, const std::string& text) {
    if (rank.file_failed) return;
    const std::string path = PathOf(trace_format::RankFileName(global_rank));
    if (rank.fd < 0) {
      rank.fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (rank.fd < 0) return Fail(rank, path, "cannot open", errno);
      char host[256] = "";
      gethostname(host, sizeof host - 1);
      const std::string header =
          "{\"kind\":\"rank\",\"rank\":" + std::to_string(global_rank) +
          ",\"node\":" + std::to_string(EnvironmentInt(env::torchrun::kGroupRank, 0)) +
          ",\"local_rank\":" + std::to_string(EnvironmentInt(env::torchrun::kLocalRank, 0)) +
          ",\"pid\":" + std::to_string(getpid()) + ",\"host\":" + JsonQuoted(host) + "}\n";
      if (!WriteAll(rank.fd, header)) return Fail(rank, path, "cannot write", errno);
    }
    if (!WriteAll(rank.fd, text)) Fail(rank, path, "cannot write", errno);
  }

  static bool WriteAll(int fd, const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t wrote = write(fd, text.data() + done, text.size() - done);
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote <= 0) return false;
      done += static_cast<size_t>(wrote);
    }
    return true;
  }

  // One line, once per rank; the calls go on unrecorded to disk.
  static void Fail(RankTrace& rank, const std::string& path, const char* what, int error) {
    rank.file_failed = true;
    const std::string line = "infini_ccl: " + std::string(trace_format::kTraceDirVariable) + ": " +
                             what + " " + path + " (" + std::strerror(error) +
                             "): this rank's trace stops here; the run goes on\n";
    (void)!write(STDERR_FILENO, line.data(), line.size());
  }

  void WriteMetrics(int global_rank, RankTrace& rank) {
    uint64_t dropped = 0;
    {
      std::lock_guard lock(rank.mutex);
      dropped = rank.dropped;
    }
    const std::string path = PathOf(trace_format::MetricsFileName(global_rank));
    const std::string temporary = path + ".tmp";
    const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;  // the trace file's line says what the folder does
    const bool written = WriteAll(fd, rank.metrics.ToJson(global_rank, dropped));
    close(fd);
    if (!written || rename(temporary.c_str(), path.c_str()) != 0) unlink(temporary.c_str());
  }

  const std::string folder_;
  size_t ring_events_;
  const int process_rank_;  // RANK, or -1: a label's rank goes first
  const pid_t owner_pid_;   // the process whose thread drains the rings

  std::mutex mutex_;  // guards ranks_, labels_, names_
  std::map<int, std::unique_ptr<RankTrace>> ranks_;
  std::unordered_map<const void*, CommunicatorLabel> labels_;
  std::deque<std::string> names_;  // interned group names; addresses stay
  struct PendingDevice {
    std::unique_ptr<DeviceSample> sample;
    int global_rank;
    TraceEvent span;  // the call's span as a device span, times to fill
  };
  std::vector<PendingDevice> pending_;  // sampled calls, oldest first

  std::mutex flush_mutex_;  // one flush at a time: each rank's file is written in order
  std::mutex stop_mutex_;
  std::condition_variable stop_changed_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

void RecordCall(const CallSpan& span, int64_t end_ns, std::unique_ptr<DeviceSample> device) {
  Recorder::Get().Call(span, end_ns, std::move(device));
}

void RecordPluginSpan(const PluginSpan& span) {
  if (trace::Enabled()) Recorder::Get().Plugin(span);
}

void ForgetCommunicator(const void* handle) {
  if (trace::Enabled()) Recorder::Get().Forget(handle);
}

}  // namespace internal

namespace trace {

int64_t NowNs() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void LabelCommunicator(const Communicator& comm, std::string_view group, int global_rank) {
  if (!Enabled() || !comm.valid()) return;
  internal::Recorder::Get().Label(comm.handle(), group, global_rank);
}

void RecordSpan(int global_rank, Category category, const char* name, std::string_view group,
                int64_t seq, uint64_t bytes, int64_t begin_ns, int64_t end_ns) {
  if (!Enabled()) return;
  internal::Recorder& recorder = internal::Recorder::Get();
  internal::TraceEvent event;
  event.category = category;
  event.name = name;
  event.group = recorder.Intern(group);
  event.seq = seq;
  event.bytes = bytes;
  event.begin_ns = begin_ns;
  event.end_ns = end_ns;
  recorder.Rank(global_rank).Push(event);
}

void RecordFault(int lane_rank, Category category, const char* name, std::string_view group,
                 const Facts& facts, int64_t begin_ns, int64_t end_ns) {
  if (!Enabled()) return;
  internal::Recorder& recorder = internal::Recorder::Get();
  internal::FaultEvent fault;
  fault.event.category = category;
  fault.event.name = name;
  fault.event.group = recorder.Intern(group);
  fault.event.seq = -1;
  fault.event.begin_ns = begin_ns;
  fault.event.end_ns = end_ns;
  fault.facts = facts.Json();
  recorder.Rank(lane_rank).PushFault(std::move(fault));
}

void FlushNow() {
  if (Enabled()) internal::Recorder::Get().FlushFromCaller();
}

void RecordClockOffset(int global_rank, int64_t offset_ns, int64_t rtt_ns, int rounds) {
  if (!Enabled()) return;
  internal::RankTrace& rank = internal::Recorder::Get().Rank(global_rank);
  std::lock_guard lock(rank.mutex);
  rank.clock = internal::ClockLine{offset_ns, rtt_ns, rounds};
}

}  // namespace trace
}  // namespace infini::ccl
