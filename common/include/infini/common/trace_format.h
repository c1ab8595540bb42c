// The communication trace (docs/tracing.md): ccl/ writes it in each rank,
// parallel/ estimates each rank's clock offset through the run's store, and
// infini_run's launcher answers those estimates and merges the files. The
// writer and the readers share these names, so they live here once.
//
// Files, under the trace folder (INFINI_CCL_TRACE_DIR, set by
// `infini_run --trace_dir`):
//   rank<R>.jsonl         one JSON object a line, appended by global rank R
//   metrics_rank<R>.json  rank R's per-op metrics (at exit, every 2 s, on SIGUSR1)
//   trace.json            the merge (Trace Event Format), by node 0's launcher
//
// Lines of rank<R>.jsonl (flat objects: strings and integers only):
//   {"kind":"rank","rank":R,"node":N,"local_rank":L,"pid":P,"host":"h"}
//   {"kind":"clock","offset_ns":O,"rtt_ns":T,"rounds":K}
//       store host's clock = this rank's clock + O (rtt_ns -1: not measured)
//   {"kind":"op","cat":"ccl","name":"all_reduce","group":"world","seq":S,
//    "dtype":"float32","count":C,"bytes":B,"world":W,"begin_ns":T0,"end_ns":T1}
//   {"kind":"op","cat":"device",...,"begin_ns":T0,"end_ns":T1}
//       the device's start/end of the ccl span with the same group and seq,
//       on this rank's host clock (INFINI_CCL_TRACE_DEVICE_EVERY)
//   {"kind":"op","cat":"plugin","name":"all_reduce","group":"world","seq":S,
//    "algorithm":"ring","protocol":"","channels":C,"bytes":B,"begin_ns":T0,"end_ns":T1}
//       what the backend's profiler interface reported (plugin_profiler_v1.h)
//   {"kind":"op","cat":"recovery","name":"shrink","group":"world","seq":-1,
//    "instant":1,"facts":"{\"lost_ranks\":[1],...}","bytes":0,"begin_ns":T0,"end_ns":T1}
//       a watchdog or recovery event ("watchdog", "recovery"): "facts" is a
//       JSON object as text (the merge puts its members into args);
//       "instant":1 marks a point (begin_ns == end_ns), else a span
//   {"kind":"dropped","count":D}   events the full ring dropped (oldest first)
//   {"kind":"end"}                 the rank's recorder closed the file cleanly
// Times are nanoseconds of the rank's system clock (Unix epoch).
//
// Clock estimate keys, under the ranks' namespace "<run_id>/<restart_count>/":
//   trace_clock/ticket   counter: a rank takes the number n of its question
//   trace_clock/ask/<n>  the rank's question (empty value)
//   trace_clock/at/<n>   the launcher's answer: its system clock, ns
#pragma once

#include <cstdint>
#include <string>

namespace infini::trace_format {

inline constexpr const char* kTraceDirVariable = "INFINI_CCL_TRACE_DIR";
inline constexpr const char* kMergedFileName = "trace.json";

inline std::string RankFileName(int global_rank) {
  return "rank" + std::to_string(global_rank) + ".jsonl";
}
inline std::string MetricsFileName(int global_rank) {
  return "metrics_rank" + std::to_string(global_rank) + ".json";
}

// Event categories ("cat"): what recorded the span.
inline constexpr const char* kCategoryCcl = "ccl";            // a ccl::Communicator call
inline constexpr const char* kCategoryGroup = "group";        // a ProcessGroup call's enqueue
inline constexpr const char* kCategoryWait = "wait";          // waiting for a Work
inline constexpr const char* kCategoryBucket = "bucket";      // a reducer bucket's issue
inline constexpr const char* kCategoryDevice = "device";      // a ccl span's device start/end
inline constexpr const char* kCategoryPlugin = "plugin";      // an event the backend reported
inline constexpr const char* kCategoryWatchdog = "watchdog";  // the watchdog fired or aborted
inline constexpr const char* kCategoryRecovery = "recovery";  // a loss, a shrink, an admission

// Every how many collectives a device span is timed (0: none).
inline constexpr const char* kDeviceEveryVariable = "INFINI_CCL_TRACE_DEVICE_EVERY";
// The merge's lane (tid) for rank R's device spans, beside its host lane R.
inline constexpr int kDeviceLaneBase = 1 << 20;

inline constexpr const char* kClockTicketKey = "trace_clock/ticket";
inline std::string ClockAskKey(int64_t number) {
  return "trace_clock/ask/" + std::to_string(number);
}
inline std::string ClockAnswerKey(int64_t number) {
  return "trace_clock/at/" + std::to_string(number);
}

}  // namespace infini::trace_format
