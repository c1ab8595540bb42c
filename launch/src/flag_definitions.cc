// infini_run's flags: each name, default and help, and the --help text made
// of them. The parser (command_line.cc) reads its defaults from here only.
#include "flag_definitions.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <string_view>
#include <vector>

#include "infini/launch/options.h"

namespace infini::launch {
namespace {

// One row of the table; a switch's default is "true" or "false", every
// value flag's is text that command_line.cc checks.
struct FlagDefinition {
  const char* name;
  bool is_bool;
  // Null: LaunchOptions' own default (options.h), written there only.
  const char* default_value;
  const char* help;
  char letter = '\0';  // torchrun's one-letter spelling
};

constexpr FlagDefinition kFlags[] = {
    {"nnodes", false, nullptr,
     "Number of nodes (machines), or MIN:MAX for an elastic run that meets again with "
     "whoever is there when a node is lost or arrives. Example: --nnodes=2 or --nnodes=2:4"},
    {"nproc_per_node", false, nullptr,
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
    {"rdzv_timeout", false, nullptr,
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
    {"max_restarts", false, nullptr,
     "Restart every rank of every node up to this many times after a failure "
     "(TORCHELASTIC_RESTART_COUNT counts them). Example: --max_restarts=3"},
    {"on_failure", false, "restart",
     "What a rank's or a node's loss does: 'restart' stops every rank (then restarts "
     "within --max_restarts); 'shrink' keeps the others running, publishes who was lost "
     "in the ranks' store and lets the program go on with fewer ranks (parallel/'s "
     "Context::RecoverFromLoss). Example: --on_failure=shrink"},
    {"min_ranks", false, nullptr,
     "With --on_failure=shrink: stop the run (non-zero exit) once fewer than this many "
     "ranks are left. Example: --min_ranks=2"},
    {"monitor_interval", false, nullptr,
     "Seconds between checks of the other nodes. Example: --monitor_interval=0.5"},
    {"term_timeout", false, nullptr,
     "Seconds between SIGTERM and SIGKILL when ranks are stopped. Example: "
     "--term_timeout=5"},
    {"log_dir", false, "",
     "Write each rank's output to LOG_DIR/RUN_ID/attempt_K/rank_N/{stdout,stderr}.log. "
     "Example: --log_dir=/tmp/logs"},
    {"redirects", false, nullptr,
     "Send these streams to the log files only: 0 none, 1 stdout, 2 stderr, 3 both; "
     "or per local rank, LOCAL_RANK:CODE,... Example: --redirects=3 or "
     "--redirects=0:0,1:3 or -r3",
     'r'},
    {"tee", false, nullptr,
     "Write these streams to the log files and the console (same codes as "
     "--redirects). Example: --tee=3 or -t3",
     't'},
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
    {"role", false, nullptr,
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
     "Example: --module or -m",
     'm'},
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

std::string Seconds(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", static_cast<double>(duration.count()) / 1000);
  return text;
}

// The default of a flag whose row has none: what a LaunchOptions holds
// before parsing, as the flag's text.
std::string DefaultFromOptions(std::string_view name) {
  const LaunchOptions defaults;
  if (name == "nnodes") return defaults.NnodesText();
  if (name == "nproc_per_node") return defaults.processes_per_node_spec;
  if (name == "rdzv_timeout") return Seconds(defaults.rendezvous_timeout);
  if (name == "max_restarts") return std::to_string(defaults.max_restarts);
  if (name == "min_ranks") return std::to_string(defaults.min_ranks);
  if (name == "monitor_interval") return Seconds(defaults.monitor_interval);
  if (name == "term_timeout") return Seconds(defaults.term_timeout);
  if (name == "role") return defaults.role;
  if (name == "redirects") return std::to_string(defaults.redirects.default_code);
  if (name == "tee") return std::to_string(defaults.tee.default_code);
  return "";
}

}  // namespace

cli::CommandLine LaunchCommandLine() {
  std::vector<cli::Flag> flags;
  for (const FlagDefinition& definition : kFlags) {
    cli::Flag flag;
    flag.name = definition.name;
    flag.type = definition.is_bool ? cli::FlagType::kSwitch : cli::FlagType::kText;
    flag.default_value = definition.default_value != nullptr ? definition.default_value
                                                             : DefaultFromOptions(flag.name);
    flag.help = definition.help;
    flag.letter = definition.letter;
    // --dump_stacks asks a live run; it is no run's setting.
    if (flag.name != "dump_stacks") {
      flag.environment = "PET_";
      for (char c : flag.name) {
        flag.environment += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      }
    }
    flag.value_optional = flag.name == "dump_stacks";  // --dump_stacks[=RUN_ID]
    flags.push_back(std::move(flag));
  }
  cli::Program program;
  program.name = "infini_run";
  program.usage_line = kUsageLine;
  program.description = kDescription;
  program.epilogue = kEpilogue;
  program.positional = cli::Program::Positional::kEndFlags;
  program.unknown_flag_hint = "; the program's own flags go after the program, or after --";
  return cli::CommandLine(std::move(program), std::move(flags));
}

std::string LaunchUsage() { return LaunchCommandLine().Usage(); }

}  // namespace infini::launch
