#include "infini/parallel/env_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <string_view>
#include <vector>

#include "infini/common/launch_env.h"
#include "infini/common/one_line.h"
#include "infini/parallel/errors.h"

extern char** environ;  // NOLINT: POSIX

namespace infini::parallel {
namespace {

constexpr int64_t kMaxCount = std::numeric_limits<int>::max();

[[noreturn]] void Fail(const std::string& message) { throw ParallelConfigError(message); }

std::string Quoted(const Environment& environment, const std::string& name) {
  auto it = environment.find(name);
  return name + "='" + (it == environment.end() ? std::string() : OneLine(it->second)) + "'";
}

// INFINI_RUN_WAITING_NOTE_S, read as infini_run reads it (fractions too), so
// that one value sets how often the launcher and its ranks say they wait.
std::optional<std::chrono::milliseconds> ReadWaitingNoteInterval(const Environment& environment) {
  auto it = environment.find("INFINI_RUN_WAITING_NOTE_S");
  if (it == environment.end() || it->second.empty()) return std::nullopt;
  const std::string& text = it->second;
  double seconds = 0;
  auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (error != std::errc() || stop != text.data() + text.size() || !(seconds > 0) ||
      seconds >= 1e7) {
    Fail(Quoted(environment, "INFINI_RUN_WAITING_NOTE_S") +
         ": expected seconds between notes of a waiting process, above 0 and below 10^7");
  }
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(seconds * 1000)));
}

bool IsSet(const Environment& environment, const std::string& name) {
  return environment.count(name) != 0;
}

// Reads the variables a family needs; all required ones must be present.
class FamilyReader {
 public:
  FamilyReader(const Environment& environment, std::string family, std::string rank_variable)
      : environment_(environment),
        family_(std::move(family)),
        rank_variable_(std::move(rank_variable)) {}

  int Rank(const std::string& name) { return Required(name, 0, "a non-negative integer"); }
  int Count(const std::string& name) { return Required(name, 1, "a positive integer"); }
  std::optional<int> OptionalRank(const std::string& name) {
    auto value = ReadInteger(environment_, name, 0, kMaxCount, "a non-negative integer");
    if (!value) return std::nullopt;
    return static_cast<int>(*value);
  }

  // "NAME='v' is not less than SIZE='s'".
  void RequireLess(const std::string& rank_name, int rank, const std::string& size_name,
                   int size) const {
    if (rank >= size) {
      Fail(Quoted(environment_, rank_name) + ": expected a rank below " +
           Quoted(environment_, size_name) + " (" + family_ + " variables)");
    }
  }

 private:
  int Required(const std::string& name, int64_t minimum, const std::string& expectation) {
    auto value = ReadInteger(environment_, name, minimum, kMaxCount, expectation);
    if (!value) {
      Fail(name + " is not set but " + Quoted(environment_, rank_variable_) +
           " is: expected every " + family_ + " variable to be set");
    }
    return static_cast<int>(*value);
  }

  const Environment& environment_;
  std::string family_;
  std::string rank_variable_;
};

// Splits a process world into nodes: world must be a multiple of per-node.
int NodesOf(const Environment& environment, const std::string& world_name, int world,
            const std::string& per_node_name, int per_node) {
  if (world % per_node != 0) {
    Fail(Quoted(environment, world_name) + " is not a multiple of " +
         Quoted(environment, per_node_name) +
         ": expected the same number of processes on every node");
  }
  return world / per_node;
}

// Our topology model numbers processes node by node; a launcher that
// numbers them otherwise (cyclic placement) is refused rather than misread.
void RequireBlockNumbering(const Environment& environment, const std::string& rank_name,
                           const std::string& local_name, const ProcessTopology& topology,
                           const std::string& hint) {
  const int expected_local = topology.layout().LocalOfProcess(topology.global_proc_rank);
  if (expected_local != topology.local_proc_rank) {
    Fail(Quoted(environment, local_name) + " does not match " + Quoted(environment, rank_name) +
         ": expected local rank " + std::to_string(expected_local) + " = rank mod " +
         std::to_string(topology.processes_per_node) +
         " processes per node (ranks numbered node by node" + hint + ")");
  }
}

ProcessTopology ReadOurs(const Environment& environment) {
  FamilyReader reader(environment, "infini_run", env::infinitrain::kGlobalProcessRank);
  ProcessTopology topology;
  topology.source = "infini_run";
  topology.global_proc_rank = reader.Rank(env::infinitrain::kGlobalProcessRank);
  topology.local_proc_rank = reader.Rank(env::infinitrain::kLocalProcessRank);
  const int proc_world_size = reader.Count(env::infinitrain::kProcessWorldSize);
  topology.nnodes = reader.Count(env::infinitrain::kNnodes);
  topology.processes_per_node = reader.Count(env::infinitrain::kProcessesPerNode);
  if (topology.layout().WideWorldSize() != proc_world_size) {
    Fail(Quoted(environment, env::infinitrain::kProcessWorldSize) +
         ": expected NNODES × NPROC_PER_NODE = " +
         std::to_string(topology.layout().WideWorldSize()));
  }
  reader.RequireLess(env::infinitrain::kGlobalProcessRank, topology.global_proc_rank,
                     env::infinitrain::kProcessWorldSize, proc_world_size);
  reader.RequireLess(env::infinitrain::kLocalProcessRank, topology.local_proc_rank,
                     env::infinitrain::kProcessesPerNode, topology.processes_per_node);
  RequireBlockNumbering(environment, env::infinitrain::kGlobalProcessRank,
                        env::infinitrain::kLocalProcessRank, topology, "");
  topology.node_rank = topology.layout().NodeOfProcess(topology.global_proc_rank);
  return topology;
}

ProcessTopology ReadTorchrun(const Environment& environment) {
  FamilyReader reader(environment, "torchrun", env::torchrun::kRank);
  ProcessTopology topology;
  topology.source = "torchrun";
  topology.global_proc_rank = reader.Rank(env::torchrun::kRank);
  topology.local_proc_rank = reader.Rank(env::torchrun::kLocalRank);
  const int world_size = reader.Count(env::torchrun::kWorldSize);
  topology.processes_per_node = reader.Count(env::torchrun::kLocalWorldSize);
  reader.RequireLess(env::torchrun::kRank, topology.global_proc_rank, env::torchrun::kWorldSize,
                     world_size);
  reader.RequireLess(env::torchrun::kLocalRank, topology.local_proc_rank,
                     env::torchrun::kLocalWorldSize, topology.processes_per_node);
  topology.nnodes = NodesOf(environment, env::torchrun::kWorldSize, world_size,
                            env::torchrun::kLocalWorldSize, topology.processes_per_node);
  RequireBlockNumbering(environment, env::torchrun::kRank, env::torchrun::kLocalRank, topology, "");
  topology.node_rank = topology.layout().NodeOfProcess(topology.global_proc_rank);
  if (auto group_rank = reader.OptionalRank(env::torchrun::kGroupRank);
      group_rank && *group_rank != topology.node_rank) {
    Fail(Quoted(environment, env::torchrun::kGroupRank) + ": expected node rank " +
         std::to_string(topology.node_rank) + " = RANK / LOCAL_WORLD_SIZE");
  }
  return topology;
}

ProcessTopology ReadSlurm(const Environment& environment) {
  FamilyReader reader(environment, "Slurm", "SLURM_PROCID");
  ProcessTopology topology;
  topology.source = "slurm";
  topology.global_proc_rank = reader.Rank("SLURM_PROCID");
  topology.local_proc_rank = reader.Rank("SLURM_LOCALID");
  const int tasks = reader.Count("SLURM_NTASKS");
  topology.nnodes = reader.Count("SLURM_NNODES");
  topology.node_rank = reader.Rank("SLURM_NODEID");
  reader.RequireLess("SLURM_PROCID", topology.global_proc_rank, "SLURM_NTASKS", tasks);
  reader.RequireLess("SLURM_NODEID", topology.node_rank, "SLURM_NNODES", topology.nnodes);
  topology.processes_per_node =
      NodesOf(environment, "SLURM_NTASKS", tasks, "SLURM_NNODES", topology.nnodes);
  reader.RequireLess("SLURM_LOCALID", topology.local_proc_rank, "SLURM_NTASKS/SLURM_NNODES",
                     topology.processes_per_node);
  if (const int expected = topology.layout().ProcessRank(topology.local_proc_rank);
      topology.global_proc_rank != expected) {
    Fail(Quoted(environment, "SLURM_PROCID") + ": expected SLURM_NODEID × tasks per node + " +
         "SLURM_LOCALID = " + std::to_string(expected) + " (use srun --distribution=block)");
  }
  return topology;
}

ProcessTopology ReadOpenMpi(const Environment& environment) {
  FamilyReader reader(environment, "OpenMPI", "OMPI_COMM_WORLD_RANK");
  ProcessTopology topology;
  topology.source = "openmpi";
  topology.global_proc_rank = reader.Rank("OMPI_COMM_WORLD_RANK");
  topology.local_proc_rank = reader.Rank("OMPI_COMM_WORLD_LOCAL_RANK");
  const int world_size = reader.Count("OMPI_COMM_WORLD_SIZE");
  topology.processes_per_node = reader.Count("OMPI_COMM_WORLD_LOCAL_SIZE");
  reader.RequireLess("OMPI_COMM_WORLD_RANK", topology.global_proc_rank, "OMPI_COMM_WORLD_SIZE",
                     world_size);
  reader.RequireLess("OMPI_COMM_WORLD_LOCAL_RANK", topology.local_proc_rank,
                     "OMPI_COMM_WORLD_LOCAL_SIZE", topology.processes_per_node);
  topology.nnodes = NodesOf(environment, "OMPI_COMM_WORLD_SIZE", world_size,
                            "OMPI_COMM_WORLD_LOCAL_SIZE", topology.processes_per_node);
  RequireBlockNumbering(environment, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", topology,
                        "; use mpirun --map-by slot");
  topology.node_rank = topology.layout().NodeOfProcess(topology.global_proc_rank);
  return topology;
}

// PMI gives only the world; MPICH's Hydra adds MPI_LOCALRANKID and
// MPI_LOCALNRANKS. Without them every process is taken to be on one node.
ProcessTopology ReadPmi(const Environment& environment) {
  FamilyReader reader(environment, "PMI", "PMI_RANK");
  ProcessTopology topology;
  topology.source = "pmi";
  topology.global_proc_rank = reader.Rank("PMI_RANK");
  const int world_size = reader.Count("PMI_SIZE");
  reader.RequireLess("PMI_RANK", topology.global_proc_rank, "PMI_SIZE", world_size);
  if (IsSet(environment, "MPI_LOCALRANKID") || IsSet(environment, "MPI_LOCALNRANKS")) {
    topology.local_proc_rank = reader.Rank("MPI_LOCALRANKID");
    topology.processes_per_node = reader.Count("MPI_LOCALNRANKS");
    reader.RequireLess("MPI_LOCALRANKID", topology.local_proc_rank, "MPI_LOCALNRANKS",
                       topology.processes_per_node);
    topology.nnodes = NodesOf(environment, "PMI_SIZE", world_size, "MPI_LOCALNRANKS",
                              topology.processes_per_node);
    RequireBlockNumbering(environment, "PMI_RANK", "MPI_LOCALRANKID", topology, "");
  } else {
    topology.local_proc_rank = topology.global_proc_rank;
    topology.processes_per_node = world_size;
    topology.nnodes = 1;
  }
  topology.node_rank = topology.layout().NodeOfProcess(topology.global_proc_rank);
  return topology;
}

std::string Lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::optional<std::string> Get(const Environment& environment, const std::string& name) {
  auto it = environment.find(name);
  if (it == environment.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

bool ReadFlag(const Environment& environment, const std::string& name) {
  auto value = Get(environment, name);
  if (!value) return false;
  const std::string lower = Lowercase(*value);
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "0" || lower == "false" || lower == "no" || lower == "off") return false;
  Fail(Quoted(environment, name) + ": expected 1 or 0 (true/false, yes/no, on/off)");
}

uint16_t ReadPort(const Environment& environment, const std::string& name) {
  auto port = ReadInteger(environment, name, 1, 65535, "a port number in 1..65535");
  return static_cast<uint16_t>(*port);
}

StoreLocation ReadStoreLocation(const Environment& environment, const ProcessTopology& topology) {
  StoreLocation location;
  const bool has_address = Get(environment, env::kStoreAddr).has_value();
  const bool has_port = Get(environment, env::kStorePort).has_value();
  if (has_address != has_port) {
    Fail(std::string(has_address ? env::kStorePort : env::kStoreAddr) + " is not set but " +
         (has_address ? Quoted(environment, env::kStoreAddr)
                      : Quoted(environment, env::kStorePort)) +
         " is: expected both (the launcher's store) or neither");
  }
  if (has_address) {
    location.kind = StoreLocation::Kind::kLauncher;
    location.host = *Get(environment, env::kStoreAddr);
    location.port = ReadPort(environment, env::kStorePort);
    return location;
  }
  const bool has_master_port = Get(environment, env::torchrun::kMasterPort).has_value();
  if (topology.proc_world_size() == 1 && !has_master_port) return location;  // in-process
  if (!has_master_port) {
    Fail(
        "MASTER_PORT is not set and neither is INFINI_STORE_ADDR/INFINI_STORE_PORT: expected "
        "the port where global rank 0 hosts the store for " +
        std::to_string(topology.proc_world_size()) +
        " processes (start the program with infini_run, or set MASTER_ADDR and MASTER_PORT)");
  }
  location.kind = StoreLocation::Kind::kMaster;
  location.port = ReadPort(environment, env::torchrun::kMasterPort);
  auto master_address = Get(environment, env::torchrun::kMasterAddr);
  if (!master_address) {
    if (topology.nnodes > 1) {
      Fail("MASTER_ADDR is not set: expected the address of the node of global rank 0 (" +
           std::to_string(topology.nnodes) + " nodes)");
    }
    master_address = "127.0.0.1";
  }
  location.host = *master_address;
  return location;
}

}  // namespace

Environment CurrentEnvironment() {
  Environment environment;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    const size_t equals = text.find('=');
    if (equals == std::string_view::npos) continue;
    environment.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return environment;
}

std::optional<int64_t> ReadInteger(const Environment& environment, const std::string& name,
                                   int64_t minimum, int64_t maximum,
                                   const std::string& expectation) {
  auto it = environment.find(name);
  if (it == environment.end()) return std::nullopt;
  const std::string& text = it->second;
  int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  // from_chars refuses "+", spaces and trailing text: all mistakes here.
  auto [stop, error] = std::from_chars(begin, end, value);
  if (text.empty() || error != std::errc() || stop != end || value < minimum || value > maximum) {
    Fail(name + "='" + OneLine(text) + "': expected " + expectation);
  }
  return value;
}

ProcessTopology ReadProcessTopology(const Environment& environment) {
  if (IsSet(environment, env::infinitrain::kGlobalProcessRank)) return ReadOurs(environment);
  if (IsSet(environment, env::torchrun::kRank)) return ReadTorchrun(environment);
  if (IsSet(environment, "SLURM_PROCID")) return ReadSlurm(environment);
  if (IsSet(environment, "OMPI_COMM_WORLD_RANK")) return ReadOpenMpi(environment);
  if (IsSet(environment, "PMI_RANK")) return ReadPmi(environment);
  return ProcessTopology{};
}

RuntimeSettings ReadRuntimeSettings(const Environment& environment,
                                    const ProcessTopology& topology) {
  RuntimeSettings settings;
  settings.store = ReadStoreLocation(environment, topology);
  if (auto run_id = Get(environment, env::kRunId)) {
    settings.run_id = *run_id;
  } else if (auto torch_run_id = Get(environment, env::torchrun::kRunId)) {
    settings.run_id = *torch_run_id;
  }
  if (auto restarts = ReadInteger(environment, env::torchrun::kRestartCount, 0, kMaxCount,
                                  "a non-negative integer")) {
    settings.restart_count = static_cast<int>(*restarts);
  }
  if (auto seconds = ReadInteger(environment, "INFINI_CCL_TIMEOUT_S", 1, 7 * 24 * 3600,
                                 "a whole number of seconds in 1..604800")) {
    settings.timeout = std::chrono::seconds(*seconds);
  }
  const std::chrono::seconds store_timeout =
      std::chrono::duration_cast<std::chrono::seconds>(settings.timeout) + kStoreTimeoutMargin;
  if (auto seconds = ReadInteger(
          environment, "INFINI_CCL_STORE_CONNECT_TIMEOUT_S", 1, store_timeout.count(),
          "a whole number of seconds in 1.." + std::to_string(store_timeout.count()) +
              " (INFINI_CCL_TIMEOUT_S + " + std::to_string(kStoreTimeoutMargin.count()) +
              " s; raise INFINI_CCL_TIMEOUT_S to wait longer)")) {
    settings.store_connect_timeout = std::chrono::seconds(*seconds);
  }
  if (auto interval = ReadWaitingNoteInterval(environment)) {
    settings.waiting_note_interval = *interval;
  }
  if (auto debug = Get(environment, "INFINI_CCL_DEBUG")) {
    const std::string level = Lowercase(*debug);
    if (level == "off" || level == "0") {
      settings.debug = DebugLevel::kOff;
    } else if (level == "info") {
      settings.debug = DebugLevel::kInfo;
    } else if (level == "detail") {
      settings.debug = DebugLevel::kDetail;
    } else {
      Fail(Quoted(environment, "INFINI_CCL_DEBUG") + ": expected OFF, INFO or DETAIL");
    }
  }
  // A staged backend (INFINI_CCL_DEVICE_BACKEND, or TRANSPORT+DEVICE in
  // INFINI_CCL_BACKEND) makes no device communicator, so its ranks may
  // always share a device.
  const auto device_backend = Get(environment, env::kDeviceBackend);
  const auto backend = Get(environment, env::kBackend);
  settings.allow_device_sharing = ReadFlag(environment, "INFINI_CCL_ALLOW_DEVICE_SHARING") ||
                                  (device_backend && !device_backend->empty()) ||
                                  (backend && backend->find('+') != std::string::npos);
  settings.devices_isolated = ReadFlag(environment, env::kDevicesIsolated);
  if (auto log_dir = Get(environment, "INFINI_CCL_LOG_DIR")) settings.log_dir = *log_dir;
  if (auto mode = Get(environment, env::kOnFailure)) {
    if (*mode == env::kOnFailureShrink) {
      settings.shrink_on_failure = true;
    } else if (*mode != "restart" && !mode->empty()) {
      Fail(Quoted(environment, env::kOnFailure) + ": expected '" + env::kOnFailureShrink +
           "' or 'restart'");
    }
  }
  if (auto notice = ReadInteger(environment, env::kJoining, 1, kMaxCount,
                                "a join notice's number (1, 2, ...), set by infini_run")) {
    if (!settings.shrink_on_failure) {
      Fail(Quoted(environment, env::kJoining) + ": expected it only with " + env::kOnFailure + "=" +
           env::kOnFailureShrink + " (joins are part of in-place recovery)");
    }
    settings.join_notice = *notice;
  }
  return settings;
}

}  // namespace infini::parallel
