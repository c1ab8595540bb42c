// -J FILE: the results in nccl-tests' JSON (src/util.cu of nccl-tests,
// JSON_FILE_VERSION 3), the same keys and nesting, so a tool that reads
// nccl-tests' file reads ours:
//   {version, start_time, args[], env[], nccl_version,
//    config{nthreads, ngpus, minimum_bytes, maximum_bytes, step_factor |
//           step_bytes, warmup_iters, iterations, aggregated_iterations,
//           validation, graph, blocking_collectives, per_iter_timing,
//           per_iter_skip, parallel_init, devices[{rank, group, pid,
//           hostname, device, device_hex, device_info}]},
//    results[{size, count, type, redop, root (a string, "%6i"),
//             out_of_place | in_place {time | cpu_time, alg_bw, bus_bw,
//             nwrong}, out_of_place_per_iter | in_place_per_iter
//             {skipped_iterations, min_us, max_us, avg_us, p50_us, p95_us,
//             p99_us, stdev_us, cv_pct, times_us[]}, actual_iterations,
//             experiment_name}],
//    out_of_bounds{count, okay}, average_bus_bandwidth{bandwidth, okay},
//    errors[], end_time}
// nccl-tests writes its booleans as the strings "true"/"false", and so do
// we. A case runs either out of place or in place (--inplace): the other
// key is null. Keys of ours beside them: "ccl_bench" at the top (backend,
// ranks, timing) and, per result, "group" (--split).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "bench_options.h"
#include "results_table.h"

namespace infini::bench {

// One rank of this process, for config.devices.
struct JsonDevice {
  int rank = 0;
  int group = 0;
  int device = 0;
  std::string device_info;  // the backend's name for it
};

struct JsonRun {
  std::string start_time;  // "%Y-%m-%d %H:%M:%S", local, as nccl-tests
  std::string end_time;
  std::vector<std::string> args;  // argv as the process got it
  std::vector<std::string> env;   // NAME=value of the variables that shape a run
  int nccl_version = 0;           // NcclVersionCode of the backend's version; 0 not NCCL
  std::string backend;
  int world_size = 0;
  int threads_per_process = 1;
  std::vector<JsonDevice> devices;
  BenchOptions options;
  std::vector<TableRow> rows;
};

// The document, one line, as nccl-tests writes it (plus a newline).
std::string FormatNcclTestsJson(const JsonRun& run);
// nccl-tests' nccl_version (major·10000 + minor·100 + patch) from a
// backend's version text "NCCL 2.28.9, CUDA runtime 13.0"; 0 when the text
// names no NCCL version.
int NcclVersionCode(std::string_view version_text);
// "2026-12-01 15:55:00": now, as nccl-tests' TIME_STRING_FORMAT.
std::string NowAsNcclTestsTime();
// The variables a JSON's env[] keeps: NCCL_*, INFINI_*, CUDA_VISIBLE_DEVICES
// and the like (not the whole environment, which may hold secrets).
std::vector<std::string> RunEnvironment();
// Writes `text` to `path` as nccl-tests does: never over a file that is
// there (path.0, path.1, … instead). Returns the path written; throws
// UsageError naming the path when it cannot be created.
std::string WriteNewFile(const std::string& path, const std::string& text);

}  // namespace infini::bench
