// The gloo plugin's profiler interface (plugin_profiler_v1.h): when the
// host has set a callback, each collective whose algorithm this plugin
// chooses reports that choice with its start and end.
#pragma once

#include <cstdint>

#include "communicator.h"

namespace infini::gloo_backend {

// The algorithms this plugin runs, as it reports them.
inline constexpr const char* kRingAlgorithm = "ring";  // gloo's ring, or our ring reduce-scatter
inline constexpr const char* kLocalCopyAlgorithm = "local_copy";  // one rank: a copy, no network

// Reports one collective from its construction to its destruction on
// `comm`; costs a relaxed load when no callback is set.
class ReportedCollective {
 public:
  ReportedCollective(const Communicator& comm, const char* name, const char* algorithm,
                     uint64_t bytes) noexcept;
  ~ReportedCollective();
  ReportedCollective(const ReportedCollective&) = delete;
  ReportedCollective& operator=(const ReportedCollective&) = delete;

 private:
  const Communicator* comm_ = nullptr;  // nullptr: nothing to report
  const char* name_ = nullptr;
  const char* algorithm_ = nullptr;
  uint64_t bytes_ = 0;
  int64_t start_ns_ = 0;
};

}  // namespace infini::gloo_backend
