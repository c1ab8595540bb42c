// A rank's runtime: who it is (Rank), which backend and device it drives,
// and the store its process groups meet through.
//
//   infini::parallel::ContextOptions options;
//   options.thread_rank = t;                  // this thread's rank in its process
//   options.threads_per_process = T;
//   auto context = infini::parallel::Context::Create(options);
//   auto world = context->NewWorldGroup();
//   world->AllReduce(tensor, tensor, infini::ccl::ReduceOp::kSum);
//
// Call Create on the thread that runs the rank: it makes the rank's device
// current on that thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/parallel/env_reader.h"
#include "infini/parallel/layout.h"
#include "infini/parallel/rank.h"
#include "infini/rendezvous/store.h"

namespace infini::parallel {

class ProcessGroup;

namespace internal {
class GroupRegistry;
class LossWatcher;
}  // namespace internal

// The world after Context::RecoverFromLoss.
struct RecoveredWorld {
  int world_size = 0;   // survivors
  int global_rank = 0;  // this rank's new number among them
  // Ranks lost so far, in the launcher's numbering (RANK), ascending; and
  // those this recovery removed.
  std::vector<int> lost_ranks;
  std::vector<int> newly_lost_ranks;
  int generation = 0;  // recoveries so far: 1 after the first
};

// The world after Context::AdmitJoiners or Context::WaitToBeAdmitted.
struct GrownWorld {
  int world_size = 0;
  int global_rank = 0;
  // Ranks admitted now, in the launcher's numbering (RANK), in the order
  // they got their new numbers (after every rank already in the world).
  std::vector<int> joined_ranks;
  int generation = 0;  // recoveries and admissions so far
};

struct ContextOptions {
  int thread_rank = 0;
  int threads_per_process = 1;
  // Backend spec for ccl::Backend::Load: "" = INFINI_CCL_BACKEND, else auto.
  std::string backend;
  // Variables to read instead of the process environment (tests).
  std::optional<Environment> environment;
};

class Context : public std::enable_shared_from_this<Context> {
 public:
  // Reads and validates the environment, loads the backend, selects and
  // makes current the rank's device, and connects to (or, on global process
  // rank 0 without a launcher store, hosts) the store. Throws
  // ParallelConfigError for a bad environment, ccl::LoadError for a backend
  // that does not load, rendezvous::StoreError when the store is unreachable.
  static std::shared_ptr<Context> Create(const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Rank& rank() const { return rank_; }
  const RuntimeSettings& settings() const { return settings_; }
  const std::shared_ptr<const ccl::Backend>& backend() const { return backend_; }
  // With a backend per device type (INFINI_CCL_BACKEND=cpu:gloo,cuda:nccl):
  // backend() is the accelerator's, and this the one of `device`'s type
  // (its groups route each call there). Throws ccl::Error naming the type
  // when the list has none for it.
  const std::shared_ptr<const ccl::Backend>& BackendFor(DLDevice device) const;
  int device_index() const { return device_index_; }
  // Whether this rank shares its device with another rank of the node
  // (INFINI_CCL_ALLOW_DEVICE_SHARING=1 and more ranks than devices).
  bool shares_device() const { return shares_device_; }
  // This rank's own store connection, with keys under
  // "<run_id>/<restart_count>/".
  rendezvous::Store& store() { return *store_; }
  std::string key_namespace() const;
  // A new connection to the same store, keys under the same namespace: for
  // callers that wait concurrently (each waiter needs its own connection),
  // such as a plugin using the store as its bootstrap.
  std::shared_ptr<rendezvous::Store> ConnectStore() const;

  // Collective over the members: every rank in `global_ranks` calls it with
  // the same name and list (a rank's group rank is its index in the list).
  // Other ranks may call it too and get a group they are not a member of.
  std::unique_ptr<ProcessGroup> NewGroup(const std::string& name, std::vector<int> global_ranks);
  std::unique_ptr<ProcessGroup> NewWorldGroup();
  // This rank's group along `axis` of `layout` (named "tp3", "dp0", ...).
  std::unique_ptr<ProcessGroup> NewLayoutGroup(const Layout& layout, Axis axis);

  // ---- In-place recovery (infini_run --on_failure=shrink) ----
  // A collective that fails because a rank was lost throws PeerLostError;
  // then every survivor calls this (docs/parallel.md, "In-place recovery").
  // It waits for the launcher's loss notice (if the collective saw the loss
  // first), agrees with the other survivors on who is gone, shrinks every
  // live group of this Context among its survivors (in the order the groups
  // were made), renumbers the ranks (rank() then says the new world) and
  // returns the new world. Groups stay the same objects; a program whose
  // DP×TP×PP layout changes re-derives it with Layout::ForSurvivors and
  // makes its layout groups anew. A loss during the agreement is included;
  // no notice within INFINI_CCL_TIMEOUT_S is a ParallelError, as is a
  // shrink that fails. Throws ParallelUsageError outside shrink mode or
  // with several thread ranks per process.
  RecoveredWorld RecoverFromLoss();
  // Whether a notice names a rank this world still counts (a program may
  // ask at a step boundary, before a collective fails).
  bool LossPending();
  // Every current rank's number as the launcher gave it (RANK), by global
  // rank: after recoveries and admissions, who is who.
  const std::vector<int>& launch_ranks() const { return launch_rank_of_; }
  bool shrink_on_failure() const { return settings_.shrink_on_failure; }

  // ---- Joiners (a replacement node of a shrinking run) ----
  // Collective over the current world, at a step boundary: every rank calls
  // it at the same point with `world`, a group of the whole world. Rank 0
  // reads how many join notices the launchers wrote (one store call) and a
  // small max all-reduce over `world` tells the others; with none new,
  // nothing changes (nullopt). Otherwise the joiners are
  // numbered after every current rank (whose numbers stay), every live group
  // of the whole world is remade among the new world (a new communicator,
  // in the order the groups were made) and other groups are kept; the new
  // global rank 0 tells the joiners their place. A program then gives the
  // joiners its state (gpt2 broadcasts the weights from rank 0). Throws
  // PeerLostError when a rank is lost meanwhile (recover, then admit at the
  // next boundary), ParallelError when the new communicator fails.
  std::optional<GrownWorld> AdmitJoiners(ProcessGroup& world);
  // Whether this rank is a joiner that has not been admitted yet
  // (INFINI_JOINING): it makes no group before WaitToBeAdmitted.
  bool joining() const { return joining_; }
  // A joiner: waits (up to INFINI_CCL_TIMEOUT_S) until the survivors admit
  // it, takes its place (rank() says the new world), and returns; then it
  // makes the groups of the whole world the survivors remade (NewWorldGroup),
  // in their order, and receives the program's state.
  GrownWorld WaitToBeAdmitted();

 private:
  Context(Rank rank, RuntimeSettings settings);
  void StartLossWatcher(std::set<int> known_lost);

  Rank rank_;
  RuntimeSettings settings_;
  std::shared_ptr<const ccl::Backend> backend_;
  // The other entries of a backend list, by device type (empty for one backend).
  std::vector<std::pair<DLDeviceType, std::shared_ptr<const ccl::Backend>>> other_backends_;
  std::string backend_spec_;  // the list, for messages
  int device_index_ = 0;
  bool shares_device_ = false;
  std::shared_ptr<void> hosted_server_;  // keeps a hosted store alive
  std::shared_ptr<rendezvous::Store> store_;
  std::string store_host_;
  uint16_t store_port_ = 0;
  std::chrono::milliseconds store_timeout_{0};
  std::string store_token_;  // never logged
  // Shrink mode: the live groups, the notice watcher, and who is who.
  std::shared_ptr<internal::GroupRegistry> groups_;
  std::unique_ptr<internal::LossWatcher> loss_watcher_;
  std::vector<int> launch_rank_of_;  // index: current global rank
  std::set<int> excluded_;           // launcher's numbering
  int world_generation_ = 0;
  int64_t joins_admitted_ = 0;  // join notices the world has taken in
  bool joining_ = false;        // INFINI_JOINING, until admitted
};

}  // namespace infini::parallel
