// The ranks of this process: one per thread, each with its own communicator,
// stream and timing events, all created before any timing starts.
//
// A thin adapter over parallel/ (topology and Rank from the environment) and
// the run's store (conformance/run_store.h), which carries the unique id and
// is lent to the plugin as its bootstrap.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench_options.h"
#include "infini/ccl/ccl.h"
#include "infini/conformance/run_store.h"
#include "infini/parallel/env_reader.h"
#include "infini/parallel/rank.h"

namespace infini::bench {

// What one thread rank owns.
struct RankResources {
  RankResources(parallel::Rank rank_in, int device_index_in)
      : rank(rank_in), device_index(device_index_in) {}

  parallel::Rank rank;
  int device_index = 0;
  ccl::Communicator communicator;
  ccl::Stream stream;
  std::unique_ptr<ccl::Event> start;
  std::unique_ptr<ccl::Event> stop;
  ccl::DeviceBuffer scalar;  // one float64, for reductions of timings and counts
  // --split: this rank's group's communicator (invalid without a split),
  // which group of how many it is, its rank and size there.
  ccl::Communicator group_communicator;
  int group_index = 0;
  int group_count = 1;

  const ccl::Backend& backend() const { return *communicator.backend(); }
  // The communicator a case's collectives run on: the group's, else the
  // world's; this rank's place and the size there.
  const ccl::Communicator& case_communicator() const {
    return group_communicator.valid() ? group_communicator : communicator;
  }
  int case_rank() const { return case_communicator().rank(); }
  int case_world_size() const { return case_communicator().world_size(); }
  // `value` reduced over the ranks of this rank's group (the world without
  // a split).
  double ReduceOverGroup(double value, ccl::ReduceOp op) const;
  // Makes this rank's device current on the calling thread.
  void ActivateDevice() const;
  // Returns when every rank has reached it (backend barrier on the stream,
  // then the stream drained).
  void Synchronize() const;
  // `value` reduced over every rank (float64 all-reduce on the backend).
  double ReduceOverRanks(double value, ccl::ReduceOp op) const;
};

class BenchWorld {
 public:
  // Reads the process topology and the store location from the environment
  // (throws parallel::ParallelConfigError naming the variable), loads the
  // backend (throws ccl::LoadError) and creates `threads_per_process` ranks,
  // their communicators initialised concurrently, one thread each.
  static std::unique_ptr<BenchWorld> Create(const std::string& backend_spec,
                                            int threads_per_process);
  ~BenchWorld();

  const parallel::ProcessTopology& topology() const { return topology_; }
  const std::shared_ptr<const ccl::Backend>& backend() const { return backend_; }
  int threads_per_process() const { return static_cast<int>(ranks_.size()); }
  int world_size() const { return ranks_.front()->rank.world_size(); }
  RankResources& rank(int thread_rank) { return *ranks_.at(static_cast<size_t>(thread_rank)); }

  // --split: every rank's group communicator, split from the world's by
  // `rule` (concurrently, one thread per rank). Throws UsageError naming the
  // rule when the groups are not all the same size (a case's buffers and
  // bus factor are planned once for every group).
  void SplitGroups(const SplitRule& rule);
  // The group size of every rank (the world size without a split).
  int case_world_size() const { return ranks_.front()->case_world_size(); }

  // Frees every communicator (concurrently, one thread per rank).
  void Destroy();

 private:
  BenchWorld() = default;

  parallel::ProcessTopology topology_;
  std::shared_ptr<const ccl::Backend> backend_;
  std::unique_ptr<conformance::RunStore> store_;  // the unique id's way, the plugin's bootstrap
  std::vector<std::unique_ptr<RankResources>> ranks_;
};

}  // namespace infini::bench
