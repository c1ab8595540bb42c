// Environment → process topology and runtime settings. Pure functions of an
// environment map, so every launcher's variables can be tested without
// starting processes.
//
// Families are read in this order; the first whose rank variable is set wins,
// and then every variable it needs must be set and valid:
//   ours      GLOBAL_PROC_RANK LOCAL_PROC_RANK PROC_WORLD_SIZE NNODES NPROC_PER_NODE
//   torchrun  RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE [GROUP_RANK]
//   Slurm     SLURM_PROCID SLURM_LOCALID SLURM_NTASKS SLURM_NNODES SLURM_NODEID
//   OpenMPI   OMPI_COMM_WORLD_RANK _LOCAL_RANK _SIZE _LOCAL_SIZE
//   PMI       PMI_RANK PMI_SIZE [MPI_LOCALRANKID MPI_LOCALNRANKS]
// None set: one process on one node (a direct run, possibly multi-threaded).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "infini/common/rank_layout.h"

namespace infini::parallel {

using Environment = std::map<std::string, std::string>;

// A copy of the process environment (environ).
Environment CurrentEnvironment();

// Which processes exist and which one this is. Threads are not part of it:
// the program decides its threads per process (see Rank).
struct ProcessTopology {
  int nnodes = 1;
  int processes_per_node = 1;
  int node_rank = 0;
  int local_proc_rank = 0;
  int global_proc_rank = 0;        // node_rank × processes_per_node + local_proc_rank
  std::string source = "default";  // "infini_run", "torchrun", "slurm", "openmpi", "pmi"

  // The arithmetic on it (infini/common/rank_layout.h), threads included.
  RankLayout layout(int threads_per_process = 1) const {
    return {nnodes, processes_per_node, node_rank, threads_per_process};
  }
  int proc_world_size() const { return layout().process_world_size(); }
};

// Throws ParallelConfigError naming the variable, its value and what was
// expected.
ProcessTopology ReadProcessTopology(const Environment& environment);

enum class DebugLevel { kOff, kInfo, kDetail };

// Where this rank's store is. Either the launcher's store
// (INFINI_STORE_ADDR/INFINI_STORE_PORT), or MASTER_ADDR:MASTER_PORT where
// global process rank 0 hosts one (torch env://), or, for a single process
// without MASTER_PORT, a store inside the process.
struct StoreLocation {
  enum class Kind { kLauncher, kMaster, kInProcess };
  Kind kind = Kind::kInProcess;
  std::string host;
  uint16_t port = 0;
};

struct RuntimeSettings {
  StoreLocation store;
  // Keys of this run live under "<run_id>/<restart_count>/": two runs, or
  // two attempts of one run (--max_restarts), never read each other's ids.
  std::string run_id = "default";
  int restart_count = 0;
  // INFINI_CCL_TIMEOUT_S: how long a collective (or a store wait for a
  // group's id) may take before the watchdog ends the process.
  std::chrono::milliseconds timeout{std::chrono::seconds(600)};
  // INFINI_CCL_STORE_CONNECT_TIMEOUT_S: how long a process tries to reach the
  // run's store before it gives up, at most the store's timeout
  // (INFINI_CCL_TIMEOUT_S + kStoreTimeoutMargin), which is also the default.
  std::optional<std::chrono::milliseconds> store_connect_timeout;
  // INFINI_RUN_WAITING_NOTE_S (infini_run's too): how often a process still
  // trying to reach the store says so; the first note after at most 5 s.
  std::chrono::milliseconds waiting_note_interval{std::chrono::seconds(30)};
  DebugLevel debug = DebugLevel::kOff;  // INFINI_CCL_DEBUG
  bool allow_device_sharing = false;    // INFINI_CCL_ALLOW_DEVICE_SHARING
  bool devices_isolated = false;        // INFINI_CCL_DEVICES_ISOLATED
  std::string log_dir;                  // INFINI_CCL_LOG_DIR: a log file per process
  // INFINI_ON_FAILURE=shrink (infini_run --on_failure=shrink): a lost rank is
  // published in the store and the others recover in place
  // (Context::RecoverFromLoss) instead of ending.
  bool shrink_on_failure = false;
  // INFINI_JOINING=<n> (set by infini_run on a node that joins a shrinking
  // run while it goes on): this rank's join notice; 0 for every other rank.
  // Such a rank waits to be admitted (Context::WaitToBeAdmitted).
  int64_t join_notice = 0;
};

inline constexpr int kDefaultTimeoutSeconds = 600;

// Store calls wait this much longer than a collective may take, so that a
// missing peer is reported by the watchdog, which names the operation.
inline constexpr std::chrono::seconds kStoreTimeoutMargin{30};

// Throws ParallelConfigError. `topology` decides whether a multi-process run
// without a launcher store needs MASTER_ADDR/MASTER_PORT.
RuntimeSettings ReadRuntimeSettings(const Environment& environment,
                                    const ProcessTopology& topology);

// Strict integer parse of environment[name]: nullopt when unset; throws
// ParallelConfigError "NAME='value': expected <expectation>" when it is not an
// integer in [minimum, maximum].
std::optional<int64_t> ReadInteger(const Environment& environment, const std::string& name,
                                   int64_t minimum, int64_t maximum,
                                   const std::string& expectation);

}  // namespace infini::parallel
