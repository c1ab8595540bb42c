// Tail latencies of one case: the spread of its per-iteration times, in
// nccl-tests' terms (its -I report: min, max, avg, p50, p95, p99, stdev,
// cv; p95/p99 by nearest rank, so with fewer than 100 samples p99 may equal
// the max).
#pragma once

#include <cstdint>
#include <vector>

namespace infini::bench {

struct IterationStats {
  int64_t samples = 0;  // 0: not measured
  double min_us = 0;
  double max_us = 0;
  double avg_us = 0;
  double p50_us = 0;
  double p95_us = 0;
  double p99_us = 0;
  double stdev_us = 0;
  double cv_pct = 0;  // stdev / avg, in percent
};

// Statistics of `times_us` (any order; empty gives samples = 0).
IterationStats ComputeIterationStats(std::vector<double> times_us);

}  // namespace infini::bench
