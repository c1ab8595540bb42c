// The run's unique-id exchange by itself, for a framework that makes its own
// communicators (ccl::Backend::CommInitRank) and does not adopt the rest of
// parallel/: the root of a group publishes the id its backend made, the
// other members wait for it. It replaces an exchange through files in the
// working directory.
//
//   infini::parallel::UniqueIdExchange exchange;          // the run's store
//   if (my_group_rank == 0) {
//     id = backend->GetUniqueId();
//     exchange.Publish("tp0", id);
//   } else {
//     id = exchange.Receive("tp0");                       // waits, with a timeout
//   }
//
// The store is the one parallel::Context uses, found the same way in the
// environment: the launcher's (INFINI_STORE_ADDR/INFINI_STORE_PORT, proving
// INFINI_RUN_TOKEN, as infini_run sets them), else MASTER_ADDR:MASTER_PORT
// (hosted by global process rank 0), else, for a single process, one inside
// it. An id lives under "<run_id>/<restart_count>/unique_id/<group>/<generation>":
// the n-th Publish (or Receive) of a group's name in a process is its
// generation n, so a group made again never reads the id of the one before,
// and an attempt after a restart never reads the previous attempt's. Call
// Publish or Receive once per process for each group made (for a process's
// thread ranks, once, before their CommInitRank calls), in the same order on
// every process, as the groups themselves are made. Nothing is left behind:
// the keys die with the run's store.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "infini/ccl/unique_id.h"
#include "infini/parallel/env_reader.h"

namespace infini::parallel {

namespace internal {
struct RunStoreEndpoint;
}

struct UniqueIdExchangeOptions {
  // Variables to read instead of the process environment (tests).
  std::optional<Environment> environment;
  // How long Receive waits for the root; unset: INFINI_CCL_TIMEOUT_S (600 s).
  std::optional<std::chrono::milliseconds> timeout;
};

class UniqueIdExchange {
 public:
  // Reads the environment and connects to the run's store, hosting it when
  // this process is the one to. Throws ParallelConfigError for a bad
  // environment, rendezvous::StoreError when the store cannot be reached.
  explicit UniqueIdExchange(const UniqueIdExchangeOptions& options = {});
  ~UniqueIdExchange();
  UniqueIdExchange(const UniqueIdExchange&) = delete;
  UniqueIdExchange& operator=(const UniqueIdExchange&) = delete;

  // The root of `group`: publishes `id` as the group's next generation.
  // Throws ParallelUsageError for an empty name or one with '/'.
  void Publish(const std::string& group, const ccl::UniqueId& id);
  // Any other member of `group`: the id its root published for the group's
  // next generation. Throws ParallelError naming the group, the generation
  // and the key when none arrives within the timeout.
  ccl::UniqueId Receive(const std::string& group);
  // The same for a generation the caller counts itself (the process's count
  // of `group` does not move).
  void Publish(const std::string& group, const ccl::UniqueId& id, uint64_t generation);
  ccl::UniqueId Receive(const std::string& group, uint64_t generation);

  // Where generation `generation` of `group` lives in the store (for logs).
  std::string KeyOf(const std::string& group, uint64_t generation) const;

 private:
  uint64_t NextGeneration(const std::string& group);

  std::unique_ptr<internal::RunStoreEndpoint> endpoint_;
  std::chrono::milliseconds timeout_{0};
};

}  // namespace infini::parallel
