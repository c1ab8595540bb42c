// infini_run's side of the communication trace (docs/tracing.md): the
// --trace_dir folder, the clock answers node 0's launcher gives the ranks,
// and the reading of the ranks' files (common/.../trace_format.h has their
// lines) for the merge and the summary (trace_merge.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace infini::launch {

// --trace_dir made absolute (against the working folder), as the ranks get
// it in INFINI_CCL_TRACE_DIR (child_env.h) and node 0 merges it. Throws
// UsageError when the working folder is unknown.
std::string AbsoluteTraceFolder(const std::string& trace_dir);

// --trace_dir: makes the folder (and its parents), proves that a file can be
// written there and removes the trace files of an earlier run in it. Throws
// UsageError (one line naming --trace_dir, the path and why) before any
// rank starts.
void PrepareTraceFolder(const std::string& trace_dir);

// Node 0's launcher, while an attempt runs: answers each rank's clock
// question with this host's clock (the store's host), so that ranks
// estimate their offsets NTP-style. Stops (within ~0.1 s) when destroyed.
class ClockAnswerer {
 public:
  ClockAnswerer(std::string store_host, uint16_t store_port, std::string run_token,
                std::string key_namespace);
  ~ClockAnswerer();
  ClockAnswerer(const ClockAnswerer&) = delete;
  ClockAnswerer& operator=(const ClockAnswerer&) = delete;

 private:
  void Loop(const std::string& host, uint16_t port, const std::string& token,
            const std::string& key_namespace);
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

struct TraceOp {
  std::string category, name, group, dtype;
  int64_t seq = 0, count = 0, bytes = 0, world = 0, begin_ns = 0, end_ns = 0;
  std::string algorithm, protocol;  // a plugin event's, when it said
  int64_t channels = -1;
  // A watchdog or recovery event's: a JSON object (empty: none), and
  // whether it is a point rather than a span.
  std::string facts;
  bool instant = false;
};

struct RankTraceFile {
  int rank = -1;
  int node = 0;
  int local_rank = 0;
  int64_t pid = 0;
  std::string host;
  bool clock_measured = false;
  int64_t clock_offset_ns = 0;  // store host's clock = this rank's + offset
  int64_t clock_rtt_ns = -1;
  bool ended = false;  // its recorder closed it (else killed, or still running)
  int64_t dropped = 0;
  int64_t unreadable_lines = 0;
  std::vector<TraceOp> ops;

  int64_t Aligned(int64_t ns) const { return ns + clock_offset_ns; }
};

// Every DIR/rank<R>.jsonl, by global rank.
std::vector<RankTraceFile> ReadRankTraces(const std::string& trace_dir);

// One metrics entry of DIR/metrics_rank<R>.json (trace_metrics.cc writes it).
struct MetricsEntry {
  int rank = -1;
  std::string group, op, size_class;
  int64_t calls = 0, bytes = 0, time_ns = 0;
  double bus_factor = 1.0;
};
std::vector<MetricsEntry> ReadMetrics(const std::string& trace_dir, int* ranks_with_metrics);

}  // namespace infini::launch
