// Per-op metrics of one rank (docs/tracing.md, "Metrics"): for each group,
// collective and size class, the calls, bytes and host time, and from them
// algbw and busbw (nccl-tests' factors, infini/ccl/bus_bandwidth.h). Fed by
// the recorder's thread from the drained spans, never by a call.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "trace_recorder.h"

namespace infini::ccl::internal {

// Size classes of a call's bytes: "<=1KiB", "<=64KiB", "<=1MiB", "<=16MiB",
// ">16MiB".
int SizeClassOf(uint64_t bytes);
const char* SizeClassName(int size_class);

class TraceMetrics {
 public:
  // Counts kCcl spans; others are ignored.
  void Add(const TraceEvent& event);
  // metrics_rank<R>.json's text.
  std::string ToJson(int global_rank, uint64_t dropped_events) const;

 private:
  struct Key {
    std::string group;
    int collective = 0;
    int size_class = 0;
    bool operator<(const Key& other) const {
      return std::tie(group, collective, size_class) <
             std::tie(other.group, other.collective, other.size_class);
    }
  };
  struct Totals {
    uint64_t calls = 0;
    uint64_t bytes = 0;
    int64_t time_ns = 0;
    int world = 0;
  };
  std::map<Key, Totals> entries_;
};

}  // namespace infini::ccl::internal
