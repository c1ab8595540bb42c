// infini_run's command line: gflags definitions, torchrun's spellings, and
// the checks that turn every bad value into one line and exit code 2.
#include <gflags/gflags.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>

#include "infini/launch/device_count.h"
#include "infini/launch/net_util.h"
#include "infini/launch/options.h"

// Every value flag is a string: the launcher checks it and names the flag,
// the value and what was expected (gflags' own errors exit 1 with a message
// that does not).
DEFINE_string(nnodes, "1", "Number of nodes (machines). Example: --nnodes=2");
DEFINE_string(nproc_per_node, "1",
              "Processes (ranks) per node: a number, or 'gpu' (the backend's device count), "
              "'cpu' (usable CPUs), 'auto' (devices if any, else CPUs). Example: "
              "--nproc_per_node=8");
DEFINE_string(node_rank, "",
              "This node's rank in [0, nnodes). Omitted: assigned in the order nodes join "
              "(node 0 is the one that hosts the rendezvous endpoint). Example: --node_rank=1");
DEFINE_string(master_addr, "",
              "torch.distributed.launch style: where the launchers meet when "
              "--rdzv_endpoint is not given (the ranks' MASTER_PORT is then another free "
              "port of node 0). Example: --master_addr=10.0.0.1");
DEFINE_string(master_port, "",
              "Port of --master_addr (default 29500). Example: --master_port=29500");
DEFINE_string(rdzv_endpoint, "",
              "HOST[:PORT] where node 0's launcher hosts the rendezvous store (default port "
              "29400). Example: --rdzv_endpoint=10.0.0.1:29400");
DEFINE_string(rdzv_id, "",
              "Run id, the same on every node; required when --nnodes > 1; generated for a "
              "single node. Names log folders and store keys. Example: --rdzv_id=job42");
DEFINE_string(rdzv_backend, "c10d",
              "Accepted for torchrun compatibility: 'c10d' or 'static' (both use infini_run's "
              "TCP store). Example: --rdzv_backend=c10d");
DEFINE_string(rdzv_conf, "",
              "torchrun's KEY=VALUE,... rendezvous settings; join_timeout=SECONDS is honoured, "
              "other keys are ignored. Example: --rdzv_conf=join_timeout=600");
DEFINE_string(rdzv_timeout, "300",
              "Seconds to wait for the other nodes (joining, agreeing, starting each "
              "attempt). Example: --rdzv_timeout=60");
DEFINE_bool(standalone, false,
            "Single node; the launcher's store takes a free local port. Example: "
            "--standalone");
DEFINE_string(ccl_backend, "",
              "Collective backend exported to the ranks as INFINI_CCL_BACKEND (default: "
              "$INFINI_CCL_BACKEND, else 'auto'). Example: --ccl_backend=nccl");
DEFINE_string(max_restarts, "0",
              "Restart every rank of every node up to this many times after a failure "
              "(TORCHELASTIC_RESTART_COUNT counts them). Example: --max_restarts=3");
DEFINE_string(monitor_interval, "0.1",
              "Seconds between checks of the other nodes. Example: --monitor_interval=0.5");
DEFINE_string(term_timeout, "30",
              "Seconds between SIGTERM and SIGKILL when ranks are stopped. Example: "
              "--term_timeout=5");
DEFINE_string(log_dir, "",
              "Write each rank's output to LOG_DIR/RUN_ID/attempt_K/rank_N/{stdout,stderr}.log. "
              "Example: --log_dir=/tmp/logs");
DEFINE_string(redirects, "0",
              "Send these streams to the log files only: 0 none, 1 stdout, 2 stderr, 3 both; "
              "or per local rank, LOCAL_RANK:CODE,... Example: --redirects=3 or "
              "--redirects=0:0,1:3");
DEFINE_string(tee, "0",
              "Write these streams to the log files and the console (same codes as "
              "--redirects). Example: --tee=3");
DEFINE_string(local_ranks_filter, "",
              "Show only these local ranks' output on the console (log files get "
              "everything). Example: --local_ranks_filter=0,3");
DEFINE_bool(dry_run, false,
            "Print each rank's command and infini_run's environment variables, start "
            "nothing. Example: --dry_run");
DEFINE_bool(no_python, false,
            "Run a PROGRAM ending in .py as it is, not as 'python3 -u PROGRAM'. Example: "
            "--no_python");

namespace infini::launch {
namespace {

constexpr char kUsage[] =
    "starts and supervises the ranks of a distributed program (a drop-in for torchrun).\n"
    "\n"
    "  infini_run [FLAGS] [--] PROGRAM [PROGRAM_ARGS...]\n"
    "\n"
    "Every flag is also spelled with dashes (--nproc-per-node=8). `--` ends the flags; "
    "without it\nthe first word that is not a flag starts the program.\n"
    "\n"
    "Examples:\n"
    "  infini_run --ccl_backend=nccl --nproc_per_node=8 ./gpt2 --batch_size 4\n"
    "  infini_run --nnodes=2 --node_rank=0 --rdzv_endpoint=10.0.0.1:29500 --rdzv_id=job42 "
    "-- ./gpt2\n"
    "  infini_run --nproc_per_node=4 --log_dir=/tmp/logs --redirects=3 --max_restarts=2 "
    "./train\n"
    "\n"
    "Exit code: 0 when every rank succeeded; the first failed rank's code (128+N for signal "
    "N);\n2 for a bad command line; 1 when the launcher itself failed (rendezvous, "
    "disagreement).\nSee docs/launcher.md for the environment every rank gets.";

struct FlagDescription {
  const char* name;
  bool is_bool;
};

constexpr FlagDescription kFlags[] = {
    {"nnodes", false},
    {"nproc_per_node", false},
    {"node_rank", false},
    {"master_addr", false},
    {"master_port", false},
    {"rdzv_endpoint", false},
    {"rdzv_id", false},
    {"rdzv_backend", false},
    {"rdzv_conf", false},
    {"rdzv_timeout", false},
    {"standalone", true},
    {"ccl_backend", false},
    {"max_restarts", false},
    {"monitor_interval", false},
    {"term_timeout", false},
    {"log_dir", false},
    {"redirects", false},
    {"tee", false},
    {"local_ranks_filter", false},
    {"dry_run", true},
    {"no_python", true},
};

const FlagDescription* FindFlag(const std::string& name) {
  for (const FlagDescription& flag : kFlags) {
    if (name == flag.name) return &flag;
  }
  return nullptr;
}

std::string Quoted(const std::string& flag, const std::string& value) {
  return "--" + flag + "='" + value + "'";
}

bool ParseWholeInt(const std::string& text, long long* value) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, error] = std::from_chars(text.data(), end, *value);
  return error == std::errc() && ptr == end;
}

int ParseIntFlag(const std::string& flag, const std::string& value, long long min_value,
                 long long max_value, const std::string& expected) {
  long long parsed = 0;
  if (!ParseWholeInt(value, &parsed) || parsed < min_value || parsed > max_value) {
    throw UsageError(Quoted(flag, value) + ": expected " + expected);
  }
  return static_cast<int>(parsed);
}

std::chrono::milliseconds ParseSecondsFlag(const std::string& flag, const std::string& value,
                                           bool zero_allowed) {
  char* end = nullptr;
  double seconds = std::strtod(value.c_str(), &end);
  bool valid = !value.empty() && end == value.c_str() + value.size() && std::isfinite(seconds) &&
               (zero_allowed ? seconds >= 0 : seconds > 0) && seconds < 1e7;
  if (!valid) {
    throw UsageError(Quoted(flag, value) + ": expected a number of seconds" +
                     (zero_allowed ? " >= 0" : " > 0") + " (e.g. 30 or 0.5)");
  }
  return std::chrono::milliseconds(static_cast<long long>(std::llround(seconds * 1000)));
}

std::vector<std::string> SplitList(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, separator)) parts.push_back(part);
  return parts;
}

StreamSelection ParseStreamSelection(const std::string& flag, const std::string& value) {
  const std::string expected =
      ": expected 0 (none), 1 (stdout), 2 (stderr), 3 (both), or LOCAL_RANK:CODE,... "
      "(e.g. 0:3,1:2)";
  StreamSelection selection;
  if (value.find(':') == std::string::npos) {
    long long code = 0;
    if (!ParseWholeInt(value, &code) || code < 0 || code > 3) {
      throw UsageError(Quoted(flag, value) + expected);
    }
    selection.default_code = static_cast<int>(code);
    return selection;
  }
  for (const std::string& entry : SplitList(value, ',')) {
    size_t colon = entry.find(':');
    long long local_rank = 0, code = 0;
    if (colon == std::string::npos || !ParseWholeInt(entry.substr(0, colon), &local_rank) ||
        local_rank < 0 || !ParseWholeInt(entry.substr(colon + 1), &code) || code < 0 || code > 3) {
      throw UsageError(Quoted(flag, value) + expected);
    }
    selection.code_by_local_rank[static_cast<int>(local_rank)] = static_cast<int>(code);
  }
  return selection;
}

// "host[:port]" or "[v6addr]:port".
void ParseEndpoint(const std::string& flag, const std::string& value, uint16_t default_port,
                   std::string* host, uint16_t* port) {
  std::string host_part = value;
  std::string port_part;
  if (!value.empty() && value[0] == '[') {
    size_t close = value.find(']');
    if (close == std::string::npos) {
      throw UsageError(Quoted(flag, value) + ": expected HOST[:PORT] ('[' without ']')");
    }
    host_part = value.substr(1, close - 1);
    if (close + 1 < value.size()) {
      if (value[close + 1] != ':') {
        throw UsageError(Quoted(flag, value) + ": expected [ADDRESS]:PORT");
      }
      port_part = value.substr(close + 2);
      if (port_part.empty()) throw UsageError(Quoted(flag, value) + ": the port is missing");
    }
  } else if (size_t colon = value.rfind(':'); colon != std::string::npos) {
    host_part = value.substr(0, colon);
    port_part = value.substr(colon + 1);
    if (port_part.empty()) throw UsageError(Quoted(flag, value) + ": the port is missing");
  }
  if (host_part.empty()) {
    throw UsageError(Quoted(flag, value) + ": expected HOST[:PORT]; the host is missing");
  }
  *host = host_part;
  *port = port_part.empty()
              ? default_port
              : static_cast<uint16_t>(ParseIntFlag(flag, port_part, 1, 65535,
                                                   "HOST[:PORT] with a numeric PORT in 1..65535"));
}

bool IsSafeRunId(const std::string& run_id) {
  if (run_id.empty() || run_id.size() > 128 || run_id[0] == '.') return false;
  for (char c : run_id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

std::string GenerateRunId() {
  std::random_device random;
  char suffix[16];
  snprintf(suffix, sizeof(suffix), "%08x", static_cast<unsigned>(random()));
  std::string host;
  for (char c : HostName()) {
    host += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  }
  return host + "-" + std::to_string(getpid()) + "-" + suffix;
}

bool IsExecutableFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
}

// PATH lookup like execvp; a name with '/' is used as it is.
std::string FindExecutable(const std::string& name, bool* exists_but_not_executable) {
  *exists_but_not_executable = false;
  auto check = [&](const std::string& path) {
    if (IsExecutableFile(path)) return true;
    if (access(path.c_str(), F_OK) == 0) *exists_but_not_executable = true;
    return false;
  };
  if (name.find('/') != std::string::npos) return check(name) ? name : "";
  const char* path_variable = getenv("PATH");
  for (const std::string& folder :
       SplitList(path_variable ? path_variable : "/usr/bin:/bin", ':')) {
    std::string candidate = (folder.empty() ? "." : folder) + "/" + name;
    if (check(candidate)) return candidate;
  }
  return "";
}

void ResolveProgram(LaunchOptions* options) {
  if (options->program_argv.empty()) {
    throw UsageError(
        "no program given: expected infini_run [FLAGS] [--] PROGRAM [ARGS...] (see --help)");
  }
  std::string program = options->program_argv[0];
  bool is_python_script =
      !FLAGS_no_python && program.size() > 3 && program.compare(program.size() - 3, 3, ".py") == 0;
  if (is_python_script) {
    // torchrun runs `python -u script.py`; so do we, unless --no_python.
    if (access(program.c_str(), R_OK) != 0) {
      throw UsageError("program '" + program + "' does not exist or cannot be read");
    }
    bool unused = false;
    std::string python = FindExecutable("python3", &unused);
    if (python.empty()) {
      throw UsageError("program '" + program +
                       "' is a Python script but python3 is not in PATH (or pass --no_python)");
    }
    options->program_argv.insert(options->program_argv.begin(), {"python3", "-u"});
    options->program_path = python;
    return;
  }
  bool not_executable = false;
  options->program_path = FindExecutable(program, &not_executable);
  if (options->program_path.empty()) {
    if (not_executable) {
      throw UsageError("program '" + program + "' is not an executable file (chmod +x?)");
    }
    throw UsageError("program '" + program + "' not found" +
                     (program.find('/') == std::string::npos ? " in PATH" : ""));
  }
}

struct SplitCommandLine {
  std::vector<std::pair<std::string, std::string>> flag_values;  // name, value
  std::vector<std::string> program_argv;
  bool help = false;
};

// Splits launcher flags from the program, accepting --name=value,
// --name value, -name, dashes or underscores in names and --noBOOL.
SplitCommandLine SplitArguments(int argc, char** argv) {
  SplitCommandLine split;
  int index = 1;
  for (; index < argc; ++index) {
    std::string argument = argv[index];
    if (argument == "--") {
      ++index;
      break;
    }
    if (argument.size() < 2 || argument[0] != '-') break;  // the program starts here
    std::string body = argument.substr(argument[1] == '-' ? 2 : 1);
    size_t equals = body.find('=');
    std::string name = body.substr(0, equals);
    for (char& c : name) c = c == '-' ? '_' : c;
    if (name == "help" || name == "h" || name == "helpfull" || name == "helpshort") {
      split.help = true;
      continue;
    }
    const FlagDescription* flag = FindFlag(name);
    std::string value;
    if (flag == nullptr && name.rfind("no", 0) == 0 && equals == std::string::npos) {
      flag = FindFlag(name.substr(2));
      if (flag != nullptr && !flag->is_bool) flag = nullptr;
      name = name.substr(2);
      value = "false";
    } else if (flag != nullptr && equals != std::string::npos) {
      value = body.substr(equals + 1);
    } else if (flag != nullptr && flag->is_bool) {
      value = "true";
    } else if (flag != nullptr) {
      if (index + 1 >= argc) throw UsageError("--" + name + " needs a value (see --help)");
      value = argv[++index];
    }
    if (flag == nullptr) {
      throw UsageError("unknown flag '" + argument +
                       "' (infini_run --help lists its flags; put the program's own flags "
                       "after the program, or after --)");
    }
    if (flag->is_bool && value != "true" && value != "false" && value != "1" && value != "0") {
      throw UsageError(Quoted(name, value) + ": expected true or false");
    }
    split.flag_values.emplace_back(name, value);
  }
  for (; index < argc; ++index) split.program_argv.push_back(argv[index]);
  return split;
}

void ValidateRendezvous(LaunchOptions* options) {
  if (FLAGS_rdzv_backend != "c10d" && FLAGS_rdzv_backend != "static") {
    throw UsageError(Quoted("rdzv_backend", FLAGS_rdzv_backend) + ": expected c10d or static");
  }
  options->rendezvous_timeout = ParseSecondsFlag("rdzv_timeout", FLAGS_rdzv_timeout, false);
  for (const std::string& setting : SplitList(FLAGS_rdzv_conf, ',')) {
    if (setting.rfind("join_timeout=", 0) == 0) {
      options->rendezvous_timeout = ParseSecondsFlag("rdzv_conf", setting.substr(13), false);
    }
  }
  if (FLAGS_standalone) {
    if (options->nnodes != 1) {
      throw UsageError("--standalone runs a single node, but --nnodes=" +
                       std::to_string(options->nnodes));
    }
    return;  // a free local port, whatever else was given (as torchrun)
  }
  if (!FLAGS_rdzv_endpoint.empty()) {
    ParseEndpoint("rdzv_endpoint", FLAGS_rdzv_endpoint, 29400, &options->rendezvous_host,
                  &options->rendezvous_port);
  } else if (!FLAGS_master_addr.empty() || !FLAGS_master_port.empty()) {
    options->rendezvous_host = FLAGS_master_addr.empty() ? "127.0.0.1" : FLAGS_master_addr;
    options->rendezvous_port =
        FLAGS_master_port.empty()
            ? 29500
            : static_cast<uint16_t>(
                  ParseIntFlag("master_port", FLAGS_master_port, 1, 65535, "a port in 1..65535"));
    if (FLAGS_master_addr.find(':') != std::string::npos &&
        FLAGS_master_addr.find('[') == std::string::npos &&
        FLAGS_master_addr.find("::") == std::string::npos) {
      throw UsageError(Quoted("master_addr", FLAGS_master_addr) +
                       ": expected a host without a port (use --master_port)");
    }
  } else if (options->multi_node()) {
    throw UsageError("--nnodes=" + std::to_string(options->nnodes) +
                     " needs --rdzv_endpoint=HOST[:PORT] (or --master_addr) so the nodes can meet");
  }
  if (options->multi_node() && !options->run_id_given) {
    throw UsageError("--nnodes=" + std::to_string(options->nnodes) +
                     " needs --rdzv_id=ID, the same on every node (as torchrun)");
  }
}

void ValidateOutput(LaunchOptions* options) {
  options->redirects = ParseStreamSelection("redirects", FLAGS_redirects);
  options->tee = ParseStreamSelection("tee", FLAGS_tee);
  for (const StreamSelection* selection : {&options->redirects, &options->tee}) {
    for (const auto& [local_rank, code] : selection->code_by_local_rank) {
      if (local_rank >= options->processes_per_node) {
        throw UsageError("--" + std::string(selection == &options->tee ? "tee" : "redirects") +
                         " names local rank " + std::to_string(local_rank) +
                         ", expected ranks below --nproc_per_node=" +
                         std::to_string(options->processes_per_node));
      }
    }
  }
  options->log_dir = FLAGS_log_dir;
  bool wants_files = options->redirects.default_code != 0 || options->tee.default_code != 0 ||
                     !options->redirects.code_by_local_rank.empty() ||
                     !options->tee.code_by_local_rank.empty();
  if (wants_files && options->log_dir.empty()) {
    // torchrun writes them to a temporary folder too.
    const char* tmp = getenv("TMPDIR");
    options->log_dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/infini_run_logs";
  }
  if (!FLAGS_local_ranks_filter.empty()) {
    for (const std::string& entry : SplitList(FLAGS_local_ranks_filter, ',')) {
      options->local_ranks_filter.push_back(
          ParseIntFlag("local_ranks_filter", entry, 0, options->processes_per_node - 1,
                       "comma-separated local ranks below --nproc_per_node=" +
                           std::to_string(options->processes_per_node)));
    }
  }
}

}  // namespace

int StreamSelection::CodeFor(int local_rank) const {
  auto found = code_by_local_rank.find(local_rank);
  return found == code_by_local_rank.end() ? default_code : found->second;
}

bool LaunchOptions::ShowsOnConsole(int local_rank) const {
  if (local_ranks_filter.empty()) return true;
  for (int shown : local_ranks_filter) {
    if (shown == local_rank) return true;
  }
  return false;
}

std::string ExecutableDirectory() {
  char path[4096];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return ".";
  std::string executable(path, static_cast<size_t>(length));
  return executable.substr(0, executable.rfind('/'));
}

bool ParseLaunchCommandLine(int argc, char** argv, LaunchOptions* options) {
  gflags::SetUsageMessage(kUsage);
  SplitCommandLine split = SplitArguments(argc, argv);
  if (split.help) {
    gflags::ShowUsageWithFlagsRestrict(argv[0], "launch/src/flags");
    return false;
  }
  for (const auto& [name, value] : split.flag_values) {
    if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
      throw UsageError(Quoted(name, value) + ": not a valid value");
    }
  }
  options->program_argv = split.program_argv;

  // nnodes: N, or torchrun's MIN:MAX with MIN == MAX (no elastic ranges).
  std::string nnodes = FLAGS_nnodes;
  if (size_t colon = nnodes.find(':'); colon != std::string::npos) {
    if (nnodes.substr(0, colon) != nnodes.substr(colon + 1)) {
      throw UsageError(Quoted("nnodes", nnodes) +
                       ": elastic ranges are not supported, expected one number of nodes");
    }
    nnodes = nnodes.substr(0, colon);
  }
  options->nnodes = ParseIntFlag("nnodes", nnodes, 1, 1 << 20, "a number of nodes >= 1");

  if (!FLAGS_node_rank.empty()) {
    options->node_rank = ParseIntFlag(
        "node_rank", FLAGS_node_rank, 0, options->nnodes - 1,
        "a node rank in [0, " + std::to_string(options->nnodes) + ") (below --nnodes)");
  } else if (!options->multi_node()) {
    options->node_rank = 0;
  }

  options->run_id_given = !FLAGS_rdzv_id.empty() && FLAGS_rdzv_id != "none";
  if (options->run_id_given) {
    if (!IsSafeRunId(FLAGS_rdzv_id)) {
      throw UsageError(Quoted("rdzv_id", FLAGS_rdzv_id) +
                       ": expected 1-128 characters of [A-Za-z0-9._-], not starting with '.'");
    }
    options->run_id = FLAGS_rdzv_id;
  } else {
    options->run_id = GenerateRunId();
  }

  options->ccl_backend = FLAGS_ccl_backend;
  if (options->ccl_backend.empty()) {
    const char* from_environment = getenv("INFINI_CCL_BACKEND");
    options->ccl_backend = from_environment && *from_environment ? from_environment : "auto";
  }
  if (options->ccl_backend.find_first_of(" \t\n=") != std::string::npos) {
    throw UsageError(Quoted("ccl_backend", options->ccl_backend) +
                     ": expected a backend name (nccl, gloo, auto) or a plugin path");
  }

  ValidateRendezvous(options);
  options->max_restarts =
      ParseIntFlag("max_restarts", FLAGS_max_restarts, 0, 1000000, "a count >= 0");
  options->monitor_interval = ParseSecondsFlag("monitor_interval", FLAGS_monitor_interval, false);
  options->term_timeout = ParseSecondsFlag("term_timeout", FLAGS_term_timeout, true);
  options->dry_run = FLAGS_dry_run;

  options->processes_per_node =
      ResolveProcessesPerNode(FLAGS_nproc_per_node, ExecutableDirectory(), options->ccl_backend);
  ValidateOutput(options);
  ResolveProgram(options);
  return true;
}

}  // namespace infini::launch
