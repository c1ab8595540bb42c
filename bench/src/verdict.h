// "Is my bandwidth right?": each line's busbw against the link it crossed
// (a small table we keep, with where each figure comes from:
// docs/performance.md, "A verdict per line"), and against a saved run
// (--expect).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench_options.h"
#include "results_table.h"

namespace infini::bench {

struct LinkProfile {
  std::string name;            // "h200_nvlink", the --link spelling
  std::string what;            // one line: the link and where the figures come from
  double peak_GBps = 0;        // the line rate per direction
  double all_reduce_GBps = 0;  // busbw NCCL (or our own run) reaches for all_reduce
  int all_reduce_ranks = 0;    // … at this many ranks (0: any); others use `other_GBps`
  double other_GBps = 0;       // busbw reached by the other collectives
  int64_t min_bytes = 0;       // smaller messages are latency-bound: no verdict
};

// A line is healthy at this share of what the link reaches or more (a
// cluster more than 20 % below the reference is "off", the usual reading).
constexpr double kHealthyShare = 0.8;

const std::vector<LinkProfile>& LinkProfiles();
// --link: "auto" picks by backend and layout (gloo on one node:
// loopback_tcp, the figure measured with gloo; another host backend: none,
// AutoHasNoVerdict says why; an NVIDIA GPU backend on one node: h200_nvlink,
// the machine we run on; else none); "none" gives no verdict. `nvls_off`
// (NCCL_NVLS_ENABLE=0, as on a shared host) takes NVLink SHARP's all_reduce
// figure out: all_reduce is then judged as the other collectives. Throws
// UsageError.
//
// `reported`: what the plugin's get_link_bandwidth said (nullopt: it has
// no such entry). Under "auto" on one node, a known figure wins over the
// table: the profile "reported" has its peak, and what NCCL reaches is the
// table's figure for that kind of link (NVLink, PCIe; else the table's
// choice) scaled by the ratio of the peaks. `what` says which was used.
std::optional<LinkProfile> ChooseLink(std::string_view link, DLDeviceType device_type,
                                      std::string_view device_vendor, std::string_view backend_name,
                                      int nnodes, bool nvls_off = false,
                                      const std::optional<ccl::LinkBandwidth>& reported = {});

// Why ChooseLink gave no profile, for the title line: empty for
// --link=none (asked for) or a named --link (always a profile).
std::string AutoHasNoVerdict(std::string_view link, DLDeviceType device_type,
                             std::string_view backend_name, int nnodes);

// Fills row.peak_percent and row.verdict ("healthy", "LOW", "latency" below
// the profile's size, or "n/a" with 0 % for a case of one rank, which
// crosses no link).
void JudgeRow(const LinkProfile& link, Collective collective, int ranks, TableRow* row);

// A saved run's time per line, by the key Expectations::KeyOf gives.
class Expectations {
 public:
  // Reads a JSON of ours or nccl-tests' (-J); throws UsageError naming the
  // file when it cannot be read or has no results.
  static Expectations Load(const std::string& path);
  // "experiment_name|group" (ours), or "size|type|redop|placement" when the
  // saved run has no experiment names (nccl-tests').
  std::string KeyOf(const TableRow& row) const;
  // Fills row.versus_saved and row.regressed: slower than the saved time by
  // more than `tolerance_percent` is a regression. A line the saved run
  // lacks says "new".
  void Compare(double tolerance_percent, TableRow* row) const;

 private:
  bool by_name_ = true;
  std::map<std::string, double> time_us_;
};

}  // namespace infini::bench
