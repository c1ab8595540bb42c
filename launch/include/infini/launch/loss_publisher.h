// --on_failure=shrink's side of the launcher: a rank that dies while others
// run is written into the ranks' store as a loss notice
// (infini/common/loss_notice.h), and the run goes on while at least
// --min_ranks ranks are left (docs/launcher.md, "In-place recovery").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "infini/common/loss_notice.h"
#include "infini/launch/supervisor.h"
#include "infini/rendezvous/store.h"

namespace infini::launch {

struct ShrinkSettings {
  std::string store_host;  // the launcher's store, which the ranks use too
  uint16_t store_port = 0;
  std::string run_token;      // empty: none
  std::string key_namespace;  // "<run_id>/<attempt>": the ranks' namespace
  int world_size = 0;         // ranks at the start of the attempt
  int min_ranks = 1;          // --min_ranks
  std::string host_name;      // for the notice's text
};

// A replacement node's launch ranks and its join notice (loss_notice.h,
// "Joins").
struct JoinBlock {
  loss_notice::LossNotice notice;  // its ranks, ascending
  int64_t number = 0;              // join/<number>: INFINI_JOINING
  int world_size = 0;              // launch ranks given so far, its own included
};

// Writes loss and join notices (one store connection, opened at the first).
class LossPublisher {
 public:
  explicit LossPublisher(ShrinkSettings settings);
  // Publishes that `global_ranks` were lost (`how`, one line, at `unix_ms`)
  // and returns how many ranks are left in the run, every node's notices
  // counted and the ranks of replacement nodes too. Throws
  // rendezvous::StoreError.
  int Publish(const std::vector<int>& global_ranks, const std::string& how, int64_t unix_ms);
  // A replacement node: takes a block of `processes_per_node` launch ranks
  // and publishes its join notice (`how`: "node K (host H) joined").
  // Throws rendezvous::StoreError.
  JoinBlock TakeJoinBlock(int processes_per_node, const std::string& how, int64_t unix_ms);

 private:
  rendezvous::Store& store();

  ShrinkSettings settings_;
  std::shared_ptr<rendezvous::Store> store_;
};

// SupervisorOptions::on_rank_lost for `settings`: publishes the loss and
// says so in one line; false (the run stops, one line saying why) when
// fewer than --min_ranks ranks are left or the notice cannot be written.
std::function<bool(const RankExit&)> MakeShrinkHandler(const ShrinkSettings& settings);

}  // namespace infini::launch
