#include "infini/launch/trace_merge.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "infini/common/json_quoted.h"
#include "infini/common/trace_format.h"

namespace infini::launch {
namespace {

std::string Microseconds(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", static_cast<double>(ns) / 1000.0);
  return text;
}

std::string Fixed(double value, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

// The collectives whose arrival the skew compares: point-to-point calls
// have two sides, not a group's.
bool IsGroupCollective(const TraceOp& op) {
  return op.category == trace_format::kCategoryCcl && !op.group.empty() && op.name != "send" &&
         op.name != "recv";
}

// A fault event's facts as the rank wrote them: one JSON object, spliced
// into args (anything else, a line cut short, is left out).
bool IsFactsObject(const std::string& facts) {
  return nlohmann::json::parse(facts, nullptr, /*allow_exceptions=*/false).is_object();
}

std::string Bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return Fixed(value, unit == 0 ? 0 : 1) + " " + units[unit];
}

}  // namespace

MergedTrace MergeTraces(const std::string& trace_dir, const std::vector<RankTraceFile>& ranks) {
  MergedTrace merged;
  if (ranks.empty()) return merged;
  int64_t origin = INT64_MAX;
  for (const RankTraceFile& rank : ranks) {
    for (const TraceOp& op : rank.ops) origin = std::min(origin, rank.Aligned(op.begin_ns));
  }
  if (origin == INT64_MAX) origin = 0;

  std::string text = "{\"traceEvents\":[\n";
  bool first = true;
  const auto add = [&](const std::string& event) {
    text += (first ? "" : ",\n") + event;
    first = false;
  };
  std::set<int> nodes;
  for (const RankTraceFile& rank : ranks) {
    if (nodes.insert(rank.node).second) {
      add("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(rank.node) +
          ",\"args\":{\"name\":" +
          JsonQuoted("node " + std::to_string(rank.node) + " (" + rank.host + ")") + "}}");
    }
    add("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(rank.node) +
        ",\"tid\":" + std::to_string(rank.rank) + ",\"args\":{\"name\":\"rank " +
        std::to_string(rank.rank) + "\"}}");
    add("{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + std::to_string(rank.node) +
        ",\"tid\":" + std::to_string(rank.rank) +
        ",\"args\":{\"sort_index\":" + std::to_string(rank.rank) + "}}");
    bool device_lane_named = false;
    for (const TraceOp& op : rank.ops) {
      // Device spans overlap the host's: a lane of their own keeps both nested.
      const bool device = op.category == trace_format::kCategoryDevice;
      const int lane = device ? trace_format::kDeviceLaneBase + rank.rank : rank.rank;
      if (device && !std::exchange(device_lane_named, true)) {
        add("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(rank.node) +
            ",\"tid\":" + std::to_string(lane) + ",\"args\":{\"name\":\"rank " +
            std::to_string(rank.rank) + " device\"}}");
      }
      const std::string ts = Microseconds(rank.Aligned(op.begin_ns) - origin);
      // A watchdog or recovery event: its own facts, a point or a span.
      if (IsFactsObject(op.facts)) {
        const std::string args = "\"group\":" + JsonQuoted(op.group) +
                                 (op.facts.size() > 2 ? "," : "") +
                                 op.facts.substr(1, op.facts.size() - 2);
        add("{\"ph\":" + std::string(op.instant ? "\"i\",\"s\":\"t\"" : "\"X\"") +
            ",\"name\":" + JsonQuoted(op.name) + ",\"cat\":" + JsonQuoted(op.category) +
            ",\"pid\":" + std::to_string(rank.node) + ",\"tid\":" + std::to_string(lane) +
            ",\"ts\":" + ts +
            (op.instant ? "" : ",\"dur\":" + Microseconds(op.end_ns - op.begin_ns)) +
            ",\"args\":{" + args + "}}");
        continue;
      }
      std::string args = "\"group\":" + JsonQuoted(op.group) +
                         ",\"seq\":" + std::to_string(op.seq) +
                         ",\"bytes\":" + std::to_string(op.bytes);
      if (op.category == trace_format::kCategoryCcl) {
        args += ",\"count\":" + std::to_string(op.count) + ",\"dtype\":" + JsonQuoted(op.dtype) +
                ",\"op\":" + JsonQuoted(op.name);
      }
      if (!op.algorithm.empty()) args += ",\"algorithm\":" + JsonQuoted(op.algorithm);
      if (!op.protocol.empty()) args += ",\"protocol\":" + JsonQuoted(op.protocol);
      if (op.channels >= 0) args += ",\"channels\":" + std::to_string(op.channels);
      add("{\"ph\":\"X\",\"name\":" + JsonQuoted(op.name) + ",\"cat\":" + JsonQuoted(op.category) +
          ",\"pid\":" + std::to_string(rank.node) + ",\"tid\":" + std::to_string(lane) +
          ",\"ts\":" + ts + ",\"dur\":" + Microseconds(op.end_ns - op.begin_ns) + ",\"args\":{" +
          args + "}}");
    }
  }
  // What the reader needs to trust the picture: the clocks and the gaps.
  std::string offsets, rtts, incomplete, dropped;
  for (const RankTraceFile& rank : ranks) {
    const std::string key = "\"" + std::to_string(rank.rank) + "\":";
    offsets += (offsets.empty() ? "" : ",") + key + std::to_string(rank.clock_offset_ns);
    rtts += (rtts.empty() ? "" : ",") + key + std::to_string(rank.clock_rtt_ns);
    if (rank.dropped > 0) {
      dropped += (dropped.empty() ? "" : ",") + key + std::to_string(rank.dropped);
    }
    if (!rank.ended) {
      incomplete += (incomplete.empty() ? "" : ",") + std::to_string(rank.rank);
      merged.notes.push_back("trace: rank " + std::to_string(rank.rank) + "'s file " +
                             trace_format::RankFileName(rank.rank) +
                             " has no end line (the rank was killed or is still running); merged "
                             "the " +
                             std::to_string(rank.ops.size()) + " events it flushed");
    }
  }
  text +=
      "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{"
      "\"clock_reference\":\"the store's host (node 0's launcher); ts in us from the first "
      "event\",\"origin_unix_ns\":" +
      std::to_string(origin) + ",\"clock_offsets_ns\":{" + offsets + "},\"clock_rtt_ns\":{" + rtts +
      "},\"incomplete_ranks\":[" + incomplete + "],\"dropped_events\":{" + dropped + "}}}\n";

  const std::string path = trace_dir + "/" + trace_format::kMergedFileName;
  const std::string temporary = path + ".tmp";
  FILE* file = std::fopen(temporary.c_str(), "w");
  bool written = file != nullptr && std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const int error = errno;
  if (file != nullptr && std::fclose(file) != 0) written = false;
  if (!written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    merged.notes.push_back("trace: cannot write " + path + " (" + std::strerror(error) +
                           "); the ranks' files stay in --trace_dir");
    return merged;
  }
  merged.path = path;
  return merged;
}

std::string CommSummary(const std::vector<RankTraceFile>& ranks,
                        const std::vector<MetricsEntry>& metrics, int ranks_with_metrics) {
  struct Row {
    int64_t calls = 0, bytes = 0, time_ns = 0;
    double bus_bytes = 0;  // bytes × factor
  };
  std::map<std::string, Row> rows;
  for (const MetricsEntry& entry : metrics) {
    Row& row = rows[entry.op];
    row.calls += entry.calls;
    row.bytes += entry.bytes;
    row.time_ns += entry.time_ns;
    row.bus_bytes += static_cast<double>(entry.bytes) * entry.bus_factor;
  }
  char line[256];
  std::string text = "communication summary (" + std::to_string(ranks_with_metrics) + " of " +
                     std::to_string(ranks.size()) +
                     " ranks' metrics; time is host time in calls, "
                     "summed over ranks):\n";
  std::snprintf(line, sizeof line, "  %-16s %10s %12s %12s %12s\n", "op", "calls", "bytes",
                "time_ms", "busbw_GBps");
  text += line;
  for (const auto& [op, row] : rows) {
    const double busbw = row.time_ns > 0 ? row.bus_bytes / static_cast<double>(row.time_ns) : 0;
    std::snprintf(line, sizeof line, "  %-16s %10lld %12s %12.3f %12.4f\n", op.c_str(),
                  static_cast<long long>(row.calls), Bytes(row.bytes).c_str(),
                  static_cast<double>(row.time_ns) / 1e6, busbw);
    text += line;
  }

  // Arrival skew: each collective (group, number) that every rank of its
  // group recorded; the last to enter, and by how much after the first.
  std::map<std::tuple<std::string, int64_t>, std::vector<std::pair<int64_t, int>>> arrivals;
  std::map<std::string, std::set<int>> group_ranks;
  for (const RankTraceFile& rank : ranks) {
    for (const TraceOp& op : rank.ops) {
      if (!IsGroupCollective(op)) continue;
      arrivals[{op.group, op.seq}].emplace_back(rank.Aligned(op.begin_ns), rank.rank);
      group_ranks[op.group].insert(rank.rank);
    }
  }
  std::map<int, std::vector<int64_t>> lateness_of;  // last rank -> its leads
  int64_t matched = 0;
  for (auto& [key, entered] : arrivals) {
    if (entered.size() < 2 || entered.size() != group_ranks[std::get<0>(key)].size()) continue;
    std::sort(entered.begin(), entered.end());
    lateness_of[entered.back().second].push_back(entered.back().first - entered.front().first);
    ++matched;
  }
  if (matched == 0) {
    return text + "  arrival skew: no collective was recorded by two or more ranks\n";
  }
  std::vector<std::pair<int, std::vector<int64_t>>> last(lateness_of.begin(), lateness_of.end());
  std::sort(last.begin(), last.end(),
            [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  text += "  arrival skew over " + std::to_string(matched) +
          " collectives (the last rank to enter, against the first, clocks aligned):\n";
  for (auto& [rank, leads] : last) {
    std::sort(leads.begin(), leads.end());
    const double median_ms = static_cast<double>(leads[leads.size() / 2]) / 1e6;
    text += "  rank " + std::to_string(rank) + " was last in " +
            Fixed(100.0 * static_cast<double>(leads.size()) / static_cast<double>(matched), 1) +
            " % of collectives, median lateness " + Fixed(median_ms, 3) + " ms\n";
  }
  return text;
}

TraceEnd FinishTraceOfRun(const std::string& trace_dir, bool with_summary) {
  TraceEnd end;
  const std::vector<RankTraceFile> ranks = ReadRankTraces(trace_dir);
  if (ranks.empty()) {
    end.notes.push_back("trace: no rank wrote a trace under --trace_dir=" + trace_dir);
    return end;
  }
  const MergedTrace merged = MergeTraces(trace_dir, ranks);
  end.notes = merged.notes;
  if (!merged.path.empty()) {
    end.notes.push_back("trace: " + std::to_string(ranks.size()) + " ranks merged into " +
                        merged.path +
                        " (Perfetto, chrome://tracing; scripts/trace_png.py draws it)");
  }
  if (!with_summary) return end;
  int ranks_with_metrics = 0;
  const std::vector<MetricsEntry> metrics = ReadMetrics(trace_dir, &ranks_with_metrics);
  end.summary = CommSummary(ranks, metrics, ranks_with_metrics);
  return end;
}

}  // namespace infini::launch
