// infini_run's flags: each name, default and help, and the --help text made
// of them. The parser (command_line.cc) reads its defaults from here.
#include "flag_definitions.h"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <vector>

#include "infini/common/usage.h"
#include "infini/launch/options.h"

namespace infini::launch {
namespace {

constexpr FlagDefinition kFlags[] = {
    {"nnodes", false, "1",
     "Number of nodes (machines), or MIN:MAX for an elastic run that meets again with "
     "whoever is there when a node is lost or arrives. Example: --nnodes=2 or --nnodes=2:4"},
    {"nproc_per_node", false, "1",
     "Processes (ranks) per node: a number, or 'gpu' (the backend's device count), "
     "'cpu' (usable CPUs), 'auto' (devices if any, else CPUs). Example: "
     "--nproc_per_node=8"},
    {"node_rank", false, "",
     "This node's rank in [0, nnodes). Omitted: assigned in the order nodes join "
     "(node 0 is the one that hosts the rendezvous endpoint). Example: --node_rank=1"},
    {"master_addr", false, "",
     "torch.distributed.launch style: where the launchers meet when "
     "--rdzv_endpoint is not given (the ranks' MASTER_PORT is then another free "
     "port of node 0). Example: --master_addr=10.0.0.1"},
    {"master_port", false, "",
     "Port of --master_addr (default 29500). Example: --master_port=29500"},
    {"rdzv_endpoint", false, "",
     "HOST[:PORT] where node 0's launcher hosts the rendezvous store (default port "
     "29400); with --rdzv_backend=etcd, the etcd members HOST[:PORT],... (default port "
     "2379). Example: --rdzv_endpoint=10.0.0.1:29400"},
    {"rdzv_id", false, "",
     "Run id, the same on every node; required when --nnodes > 1; generated for a "
     "single node. Names log folders and store keys. Example: --rdzv_id=job42"},
    {"rdzv_backend", false, "c10d",
     "'c10d' or 'static' (both: node 0's launcher hosts infini_run's TCP store), or "
     "'etcd' (also 'etcd-v2'): the launchers meet through the etcd cluster at "
     "--rdzv_endpoint (v3 API). Example: --rdzv_backend=etcd"},
    {"rdzv_conf", false, "",
     "KEY=VALUE,... rendezvous settings: join_timeout=S (as --rdzv_timeout), "
     "heartbeat_timeout=S (a node silent this long is lost; default 15), "
     "keep_alive_interval=S and keep_alive_max_attempt=N (torchrun's; their product "
     "is the heartbeat timeout), token_file=PATH (the run's secret, else "
     "$INFINI_RUN_TOKEN), last_call_timeout=S (--nnodes=MIN:MAX: how long a round "
     "waits for more nodes once MIN joined; default 30), relay=0 (several nodes: the ranks use "
     "the run's store directly, not through their launcher's relay; default 1), relay_log=PATH "
     "(the relay appends each call it makes upstream, then its counts); torchrun's "
     "read_timeout, close_timeout, "
     "timeout, is_host, use_libuv are accepted. Example: "
     "--rdzv_conf=token_file=/run/secrets/job42,heartbeat_timeout=10"},
    {"rdzv_timeout", false, "300",
     "Seconds to wait for the other nodes (joining, agreeing, starting each "
     "attempt). Example: --rdzv_timeout=60"},
    {"standalone", true, "false",
     "Single node; the launcher's store takes a free local port. Example: "
     "--standalone"},
    {"ccl_backend", false, "",
     "Collective backend exported to the ranks as INFINI_CCL_BACKEND (default: "
     "$INFINI_CCL_BACKEND, else 'auto'); TRANSPORT+DEVICE stages (gloo+nccl); one per device "
     "type, the tensor's device choosing (PyTorch's spelling): cpu:gloo,cuda:nccl. Example: "
     "--ccl_backend=nccl"},
    {"device_backend", false, "",
     "Stage the host backend's collectives through this device backend's buffers and streams "
     "(INFINI_CCL_DEVICE_BACKEND): several ranks may share a device. Per local rank, for a "
     "job of mixed devices: LOCAL_RANK:NAME entries, 'none' for a rank on host buffers. "
     "Example: --ccl_backend=gloo --device_backend=nccl, or --device_backend=nccl,3:none"},
    {"max_restarts", false, "0",
     "Restart every rank of every node up to this many times after a failure "
     "(TORCHELASTIC_RESTART_COUNT counts them). Example: --max_restarts=3"},
    {"on_failure", false, "restart",
     "What a rank's or a node's loss does: 'restart' stops every rank (then restarts "
     "within --max_restarts); 'shrink' keeps the others running, publishes who was lost "
     "in the ranks' store and lets the program go on with fewer ranks (parallel/'s "
     "Context::RecoverFromLoss). Example: --on_failure=shrink"},
    {"min_ranks", false, "1",
     "With --on_failure=shrink: stop the run (non-zero exit) once fewer than this many "
     "ranks are left. Example: --min_ranks=2"},
    {"monitor_interval", false, "0.1",
     "Seconds between checks of the other nodes. Example: --monitor_interval=0.5"},
    {"term_timeout", false, "30",
     "Seconds between SIGTERM and SIGKILL when ranks are stopped. Example: "
     "--term_timeout=5"},
    {"log_dir", false, "",
     "Write each rank's output to LOG_DIR/RUN_ID/attempt_K/rank_N/{stdout,stderr}.log. "
     "Example: --log_dir=/tmp/logs"},
    {"redirects", false, "0",
     "Send these streams to the log files only: 0 none, 1 stdout, 2 stderr, 3 both; "
     "or per local rank, LOCAL_RANK:CODE,... Example: --redirects=3 or "
     "--redirects=0:0,1:3"},
    {"tee", false, "0",
     "Write these streams to the log files and the console (same codes as "
     "--redirects). Example: --tee=3"},
    {"local_ranks_filter", false, "",
     "Show only these local ranks' output on the console (log files get "
     "everything). Example: --local_ranks_filter=0,3"},
    {"trace_dir", false, "",
     "Record every rank's communication into TRACE_DIR/rank<R>.jsonl and per-op metrics "
     "(INFINI_CCL_TRACE_DIR for the ranks); node 0 merges them into TRACE_DIR/trace.json "
     "at the end (docs/tracing.md). Example: --trace_dir=/tmp/trace"},
    {"comm_summary", true, "false",
     "With --trace_dir: print one table at the end of the run: per op kind calls, bytes, "
     "time and busbw, and which rank arrived last at the collectives. Example: "
     "--comm_summary"},
    {"dump_stacks", false, "",
     "Instead of starting a run: ask the launcher of a live run on this machine (the one "
     "run of this user, or RUN_ID) to print every rank's stacks (gdb, symbolized) on its "
     "stderr and in LOG_DIR's rank_N/stacks.log; the run goes on. The same as "
     "'kill -USR2 <launcher pid>'. Example: --dump_stacks or --dump_stacks=job42"},
    {"dry_run", true, "false",
     "Print each rank's command and infini_run's environment variables, start "
     "nothing. Example: --dry_run"},
    {"start_method", false, "spawn",
     "Accepted for torchrun compatibility (spawn, fork, forkserver): ranks are always "
     "new processes (fork+exec). Example: --start_method=spawn"},
    {"role", false, "default",
     "Role of this node's ranks, exported as ROLE_NAME (torchrun). Example: "
     "--role=trainer"},
    {"local_addr", false, "",
     "Address of this node; when it is node 0, the ranks' MASTER_ADDR (default: the "
     "rendezvous host). Example: --local_addr=10.0.0.1"},
    {"logs_specs", false, "",
     "Accepted for torchrun compatibility: only torchrun's default log layout exists "
     "(empty or 'default'). Example: --logs_specs=default"},
    {"module", true, "false",
     "Run PROGRAM as a Python module: 'python3 -u -m PROGRAM' (torchrun's -m). "
     "Example: --module"},
    {"run_path", true, "false",
     "Run PROGRAM as a Python script whatever its name ('python3 -u PROGRAM'; "
     "torchrun's --run_path). Example: --run_path"},
    {"isolate_devices", true, "false",
     "Give each rank only its own local device through the backend's visibility "
     "variable (e.g. CUDA_VISIBLE_DEVICES=<local rank>, or the local rank's entry of "
     "the list already set), so programs that always use device 0 run unchanged. "
     "Example: --isolate_devices"},
    {"no_python", true, "false",
     "Run a PROGRAM ending in .py as it is, not as 'python3 -u PROGRAM'. Example: "
     "--no_python"},
};

constexpr char kUsageLine[] = "infini_run [FLAGS] [--] PROGRAM [PROGRAM_ARGS...]";

constexpr char kDescription[] =
    "Starts and supervises the ranks of a distributed program (a drop-in for torchrun).\n"
    "\n"
    "Every flag is also spelled with dashes (--nproc-per-node=8). `--` ends the flags; "
    "without it\nthe first word that is not a flag starts the program. As torchrun, "
    "PET_<FLAG> in the environment\n(PET_NNODES, PET_NPROC_PER_NODE, PET_MASTER_ADDR, "
    "as Kubeflow sets them) is a flag's default.\n"
    "\n"
    "Examples:\n"
    "  infini_run --ccl_backend=nccl --nproc_per_node=8 ./gpt2 --batch_size 4\n"
    "  infini_run --nnodes=2 --node_rank=0 --rdzv_endpoint=10.0.0.1:29500 --rdzv_id=job42 "
    "-- ./gpt2\n"
    "  infini_run --nproc_per_node=4 --log_dir=/tmp/logs --redirects=3 --max_restarts=2 "
    "./train\n";

constexpr char kEpilogue[] =
    "Exit code: 0 when every rank succeeded; the first failed rank's code (128+N for signal "
    "N);\n2 for a bad command line; 1 when the launcher itself failed (rendezvous, "
    "disagreement).\nSee docs/launcher.md for the environment every rank gets.";

}  // namespace

std::span<const FlagDefinition> LaunchFlags() { return kFlags; }

const FlagDefinition* FindFlag(const std::string& name) {
  for (const FlagDefinition& flag : LaunchFlags()) {
    if (name == flag.name) return &flag;
  }
  return nullptr;
}

std::string LongName(const std::string& name) {
  if (name == "r") return "redirects";
  if (name == "t") return "tee";
  if (name == "m") return "module";
  return name;
}

std::string EnvironmentNameOf(const FlagDefinition& flag) {
  std::string variable = "PET_";
  for (const char* c = flag.name; *c; ++c) {
    variable += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
  }
  return variable;
}

FlagValues::FlagValues(char* const* environment) {
  for (const FlagDefinition& flag : LaunchFlags()) {
    values_[flag.name] = flag.default_value;
    if (!environment || std::string_view(flag.name) == "dump_stacks") continue;
    const std::string variable = EnvironmentNameOf(flag);
    const std::string prefix = variable + "=";
    for (char* const* entry = environment; *entry; ++entry) {
      if (std::string_view(*entry).substr(0, prefix.size()) != prefix) continue;
      std::string value = *entry + prefix.size();
      if (flag.is_bool && value != "0" && value != "1" && value != "true" && value != "false") {
        throw UsageError(variable + "='" + OneLine(value) +
                         "': expected 0 or 1 (the default of --" + flag.name + ")");
      }
      values_[flag.name] = value;
      from_environment_[flag.name] = variable;
    }
  }
}

void FlagValues::Set(const std::string& name, const std::string& value) {
  values_[name] = value;
  from_environment_.erase(name);
}

std::string FlagValues::NameSources(const std::string& message) const {
  std::string named = message;
  for (const auto& [name, variable] : from_environment_) {
    if (message.find("--" + name) != std::string::npos) {
      named += " (--" + name + " came from " + variable + ")";
    }
  }
  return named;
}

std::string NearestFlagName(const std::string& name) {
  // Levenshtein distance, one row at a time.
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
        diagonal = above;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;  // farther: no guess
  std::vector<std::string> prefixed;
  for (const FlagDefinition& flag : LaunchFlags()) {
    const std::string candidate = flag.name;
    if (name.size() >= 3 && candidate.rfind(name, 0) == 0) prefixed.push_back(candidate);
    const size_t d = distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  if (best.empty() && prefixed.size() == 1) return prefixed.front();
  return best;
}

std::string LaunchUsage() {
  std::vector<flags::FlagHelp> shown;
  for (const FlagDefinition& flag : LaunchFlags()) {
    shown.push_back(
        {flag.name, flag.is_bool ? "" : "VALUE",
         flag.is_bool ? flag.default_value : "\"" + std::string(flag.default_value) + "\"",
         flag.help});
  }
  return flags::FormatUsage(kUsageLine, kDescription, shown, kEpilogue);
}

}  // namespace infini::launch
