#include "iteration_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace infini::bench {
namespace {

// nccl-tests' percentileIndex: the nearest rank, ceil(n·p/100) − 1.
size_t PercentileIndex(size_t samples, size_t percentile) {
  return std::min(samples - 1, (samples * percentile + 99) / 100 - 1);
}

}  // namespace

IterationStats ComputeIterationStats(std::vector<double> times_us) {
  IterationStats stats;
  if (times_us.empty()) return stats;
  std::sort(times_us.begin(), times_us.end());
  const size_t samples = times_us.size();
  stats.samples = static_cast<int64_t>(samples);
  stats.min_us = times_us.front();
  stats.max_us = times_us.back();
  stats.p50_us = times_us[samples / 2];
  stats.p95_us = times_us[PercentileIndex(samples, 95)];
  stats.p99_us = times_us[PercentileIndex(samples, 99)];
  stats.avg_us = std::accumulate(times_us.begin(), times_us.end(), 0.0) / samples;
  double variance = 0;
  for (double time : times_us) variance += (time - stats.avg_us) * (time - stats.avg_us);
  stats.stdev_us = std::sqrt(variance / samples);
  stats.cv_pct = stats.avg_us > 0 ? stats.stdev_us / stats.avg_us * 100 : 0;
  return stats;
}

}  // namespace infini::bench
