#include "trace_metrics.h"

#include <iterator>

#include "infini/ccl/bus_bandwidth.h"
#include "infini/common/json_quoted.h"

namespace infini::ccl::internal {
namespace {

constexpr uint64_t kSizeClassLimits[] = {1ull << 10, 1ull << 16, 1ull << 20, 1ull << 24};
constexpr const char* kSizeClassNames[] = {"<=1KiB", "<=64KiB", "<=1MiB", "<=16MiB", ">16MiB"};
static_assert(std::size(kSizeClassNames) == std::size(kSizeClassLimits) + 1);

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

}  // namespace

int SizeClassOf(uint64_t bytes) {
  int size_class = 0;
  while (size_class < static_cast<int>(std::size(kSizeClassLimits)) &&
         bytes > kSizeClassLimits[size_class]) {
    ++size_class;
  }
  return size_class;
}

const char* SizeClassName(int size_class) { return kSizeClassNames[size_class]; }

void TraceMetrics::Add(const TraceEvent& event) {
  if (event.category != trace::Category::kCcl || event.collective < 0) return;
  Totals& totals = entries_[Key{event.group != nullptr ? *event.group : std::string(),
                                event.collective, SizeClassOf(event.bytes)}];
  ++totals.calls;
  totals.bytes += event.bytes;
  totals.time_ns += event.end_ns - event.begin_ns;
  totals.world = event.world;
}

std::string TraceMetrics::ToJson(int global_rank, uint64_t dropped_events) const {
  std::string text = "{\"rank\":" + std::to_string(global_rank) + ",\"entries\":[";
  Totals all;
  bool first = true;
  for (const auto& [key, totals] : entries_) {
    const auto collective = static_cast<Collective>(key.collective);
    const double factor = BusBandwidthFactor(collective, totals.world);
    // GB/s = bytes per ns.
    const double algbw =
        totals.time_ns > 0 ? static_cast<double>(totals.bytes) / totals.time_ns : 0.0;
    text += std::string(first ? "" : ",") + "\n{\"group\":" + JsonQuoted(key.group) +
            ",\"op\":" + JsonQuoted(CollectiveName(collective)) +
            ",\"size_class\":" + JsonQuoted(SizeClassName(key.size_class)) +
            ",\"calls\":" + std::to_string(totals.calls) +
            ",\"bytes\":" + std::to_string(totals.bytes) +
            ",\"time_ns\":" + std::to_string(totals.time_ns) +
            ",\"world\":" + std::to_string(totals.world) + ",\"bus_factor\":" + Number(factor) +
            ",\"algbw_GBps\":" + Number(algbw) + ",\"busbw_GBps\":" + Number(algbw * factor) + "}";
    first = false;
    all.calls += totals.calls;
    all.bytes += totals.bytes;
    all.time_ns += totals.time_ns;
  }
  text += "],\n\"total\":{\"calls\":" + std::to_string(all.calls) +
          ",\"bytes\":" + std::to_string(all.bytes) +
          ",\"time_ns\":" + std::to_string(all.time_ns) +
          "},\"dropped_events\":" + std::to_string(dropped_events) + "}\n";
  return text;
}

}  // namespace infini::ccl::internal
