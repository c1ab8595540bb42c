// infini_run's command line: gflags definitions, torchrun's spellings, and
// the checks that turn every bad value into one line and exit code 2.
#include <gflags/gflags.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "infini/common/launch_env.h"
#include "infini/launch/device_count.h"
#include "infini/launch/log_files.h"
#include "infini/launch/net_util.h"
#include "infini/launch/options.h"
#include "infini/rendezvous/run_token.h"

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
              "29400); with --rdzv_backend=etcd, the etcd members HOST[:PORT],... (default port "
              "2379). Example: --rdzv_endpoint=10.0.0.1:29400");
DEFINE_string(rdzv_id, "",
              "Run id, the same on every node; required when --nnodes > 1; generated for a "
              "single node. Names log folders and store keys. Example: --rdzv_id=job42");
DEFINE_string(rdzv_backend, "c10d",
              "'c10d' or 'static' (both: node 0's launcher hosts infini_run's TCP store), or "
              "'etcd' (also 'etcd-v2'): the launchers meet through the etcd cluster at "
              "--rdzv_endpoint (v3 API). Example: --rdzv_backend=etcd");
DEFINE_string(rdzv_conf, "",
              "KEY=VALUE,... rendezvous settings: join_timeout=S (as --rdzv_timeout), "
              "heartbeat_timeout=S (a node silent this long is lost; default 15), "
              "keep_alive_interval=S and keep_alive_max_attempt=N (torchrun's; their product "
              "is the heartbeat timeout), token_file=PATH (the run's secret, else "
              "$INFINI_RUN_TOKEN); torchrun's read_timeout, last_call_timeout, close_timeout, "
              "timeout, is_host, use_libuv are accepted. Example: "
              "--rdzv_conf=token_file=/run/secrets/job42,heartbeat_timeout=10");
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
DEFINE_string(start_method, "spawn",
              "Accepted for torchrun compatibility (spawn, fork, forkserver): ranks are always "
              "new processes (fork+exec). Example: --start_method=spawn");
DEFINE_string(role, "default",
              "Role of this node's ranks, exported as ROLE_NAME (torchrun). Example: "
              "--role=trainer");
DEFINE_string(local_addr, "",
              "Address of this node; when it is node 0, the ranks' MASTER_ADDR (default: the "
              "rendezvous host). Example: --local_addr=10.0.0.1");
DEFINE_string(logs_specs, "",
              "Accepted for torchrun compatibility: only torchrun's default log layout exists "
              "(empty or 'default'). Example: --logs_specs=default");
DEFINE_bool(module, false,
            "Run PROGRAM as a Python module: 'python3 -u -m PROGRAM' (torchrun's -m). "
            "Example: --module");
DEFINE_bool(run_path, false,
            "Run PROGRAM as a Python script whatever its name ('python3 -u PROGRAM'; "
            "torchrun's --run_path). Example: --run_path");
DEFINE_bool(isolate_devices, false,
            "Give each rank only its own local device through the backend's visibility "
            "variable (e.g. CUDA_VISIBLE_DEVICES=<local rank>, or the local rank's entry of "
            "the list already set), so programs that always use device 0 run unchanged. "
            "Example: --isolate_devices");
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
    {"start_method", false},
    {"role", false},
    {"local_addr", false},
    {"logs_specs", false},
    {"module", true},
    {"run_path", true},
    {"isolate_devices", true},
};

// torchrun's one-letter spellings.
std::string LongName(const std::string& name) {
  if (name == "r") return "redirects";
  if (name == "t") return "tee";
  if (name == "m") return "module";
  return name;
}

const FlagDescription* FindFlag(const std::string& name) {
  for (const FlagDescription& flag : kFlags) {
    if (name == flag.name) return &flag;
  }
  return nullptr;
}

std::string Quoted(const std::string& flag, const std::string& value) {
  return "--" + flag + "='" + OneLine(value) + "'";
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
                     (zero_allowed ? " >= 0" : " > 0") + " and below 10000000 (e.g. 30 or 0.5)");
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
  if (FLAGS_module) {
    if (FLAGS_no_python) throw UsageError("--module and --no_python exclude each other");
    bool unused = false;
    std::string python = FindExecutable("python3", &unused);
    if (python.empty()) throw UsageError("--module needs python3 in PATH");
    options->program_argv.insert(options->program_argv.begin(), {"python3", "-u", "-m"});
    options->program_path = python;
    return;
  }
  bool is_python_script =
      !FLAGS_no_python && (FLAGS_run_path || (program.size() > 3 &&
                                              program.compare(program.size() - 3, 3, ".py") == 0));
  if (is_python_script) {
    // torchrun runs `python -u script.py`; so do we, unless --no_python.
    if (access(program.c_str(), R_OK) != 0) {
      throw UsageError("program '" + OneLine(program) + "' does not exist or cannot be read");
    }
    bool unused = false;
    std::string python = FindExecutable("python3", &unused);
    if (python.empty()) {
      throw UsageError("program '" + OneLine(program) +
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
      throw UsageError("program '" + OneLine(program) + "' is not an executable file (chmod +x?)");
    }
    throw UsageError("program '" + OneLine(program) + "' not found" +
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
    std::string name = LongName(body.substr(0, equals));
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
      throw UsageError("unknown flag '" + OneLine(argument) +
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

std::string ReadTokenFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    throw UsageError("--rdzv_conf=token_file='" + OneLine(path) + "': cannot be read");
  }
  std::string token;
  std::getline(file, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) {
    throw UsageError("--rdzv_conf=token_file='" + OneLine(path) +
                     "': expected the run's secret on its first line, found none");
  }
  return token;
}

// torchrun's c10d settings are accepted; ours are honoured; others refused.
void ParseRendezvousConf(LaunchOptions* options) {
  static const std::set<std::string> kAcceptedTorchrunKeys = {
      "read_timeout", "last_call_timeout", "close_timeout", "timeout", "is_host", "use_libuv"};
  std::optional<std::chrono::milliseconds> keep_alive_interval;
  std::optional<int> keep_alive_attempts;
  std::string token_file;
  for (const std::string& setting : SplitList(FLAGS_rdzv_conf, ',')) {
    if (setting.empty()) continue;
    const size_t equals = setting.find('=');
    const std::string key = setting.substr(0, equals);
    const std::string value = equals == std::string::npos ? "" : setting.substr(equals + 1);
    const std::string flag = "rdzv_conf " + key;
    if (key == "join_timeout") {
      options->rendezvous_timeout = ParseSecondsFlag(flag, value, false);
    } else if (key == "heartbeat_timeout") {
      options->heartbeat_timeout = ParseSecondsFlag(flag, value, false);
      if (options->heartbeat_timeout < std::chrono::milliseconds(200)) {
        throw UsageError(Quoted("rdzv_conf", setting) + ": expected at least 0.2 seconds");
      }
    } else if (key == "keep_alive_interval") {
      keep_alive_interval = ParseSecondsFlag(flag, value, false);
    } else if (key == "keep_alive_max_attempt") {
      keep_alive_attempts = ParseIntFlag(flag, value, 1, 1000, "a count in 1..1000");
    } else if (key == "token_file") {
      if (value.empty()) throw UsageError(Quoted("rdzv_conf", setting) + ": expected a path");
      token_file = value;
    } else if (!kAcceptedTorchrunKeys.count(key) || equals == std::string::npos) {
      throw UsageError(Quoted("rdzv_conf", setting) +
                       ": expected KEY=VALUE with KEY one of join_timeout, heartbeat_timeout, "
                       "keep_alive_interval, keep_alive_max_attempt, token_file, read_timeout, "
                       "last_call_timeout, close_timeout, timeout, is_host, use_libuv");
    }
  }
  if (keep_alive_interval || keep_alive_attempts) {
    options->heartbeat_timeout =
        keep_alive_interval.value_or(std::chrono::seconds(5)) * keep_alive_attempts.value_or(3);
  }
  if (!token_file.empty()) {
    options->run_token = ReadTokenFile(token_file);
  } else {
    options->run_token = rendezvous::RunTokenFromEnvironment();
  }
  if (options->run_token.find_first_of("\n\r") != std::string::npos) {
    throw UsageError("the run's secret (INFINI_RUN_TOKEN or token_file) holds a line break");
  }
}

// --rdzv_backend=etcd: HOST[:PORT],... (etcd's client port 2379 by default).
void ParseEtcdEndpoints(LaunchOptions* options) {
  if (FLAGS_rdzv_endpoint.empty()) {
    throw UsageError("--rdzv_backend=" + FLAGS_rdzv_backend +
                     " needs --rdzv_endpoint=HOST:2379[,HOST:2379...], the etcd members");
  }
  for (const std::string& member : SplitList(FLAGS_rdzv_endpoint, ',')) {
    std::string host;
    uint16_t port = 0;
    ParseEndpoint("rdzv_endpoint", member, 2379, &host, &port);
    const bool bracket = host.find(':') != std::string::npos;
    options->etcd_endpoints.push_back((bracket ? "[" + host + "]" : host) + ":" +
                                      std::to_string(port));
    if (options->etcd_endpoints.size() == 1) {
      options->rendezvous_host = host;  // named in messages
      options->rendezvous_port = port;
    }
  }
}

void ValidateRendezvous(LaunchOptions* options) {
  options->rendezvous_on_etcd = FLAGS_rdzv_backend == "etcd" || FLAGS_rdzv_backend == "etcd-v2";
  if (FLAGS_rdzv_backend != "c10d" && FLAGS_rdzv_backend != "static" &&
      !options->rendezvous_on_etcd) {
    throw UsageError(Quoted("rdzv_backend", FLAGS_rdzv_backend) +
                     ": expected c10d, static or etcd (etcd-v2)");
  }
  options->rendezvous_timeout = ParseSecondsFlag("rdzv_timeout", FLAGS_rdzv_timeout, false);
  ParseRendezvousConf(options);
  if (FLAGS_standalone) {
    if (options->nnodes != 1) {
      throw UsageError("--standalone runs a single node, but --nnodes=" +
                       std::to_string(options->nnodes));
    }
    return;  // a free local port, whatever else was given (as torchrun)
  }
  if (options->rendezvous_on_etcd) {
    ParseEtcdEndpoints(options);
  } else if (!FLAGS_rdzv_endpoint.empty()) {
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
    if (!FLAGS_rdzv_endpoint.empty() && FLAGS_rdzv_backend != "static") {
      throw UsageError("--nnodes=" + std::to_string(options->nnodes) +
                       " needs --rdzv_id=ID, the same on every node (as torchrun)");
    }
    // torchrun's static form (--master_addr/--master_port): the endpoint
    // names the run.
    std::string id = "static-";
    for (char c : options->rendezvous_host) {
      id += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
    }
    options->run_id = id.substr(0, 100) + "-" + std::to_string(options->rendezvous_port);
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
    // Never a shared temporary folder: another user could plant symlinks
    // there or read the logs.
    options->log_dir = PrivateDefaultLogDir();
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

void ValidateTorchrunOnlyFlags(LaunchOptions* options) {
  if (FLAGS_start_method != "spawn" && FLAGS_start_method != "fork" &&
      FLAGS_start_method != "forkserver") {
    throw UsageError(Quoted("start_method", FLAGS_start_method) +
                     ": expected spawn, fork or forkserver");
  }
  if (!FLAGS_logs_specs.empty() && FLAGS_logs_specs != "default") {
    throw UsageError(Quoted("logs_specs", FLAGS_logs_specs) +
                     ": expected 'default' (infini_run has torchrun's default log layout only)");
  }
  if (FLAGS_role.empty() || FLAGS_role.find_first_of("\n\r=") != std::string::npos) {
    throw UsageError(Quoted("role", FLAGS_role) + ": expected a name");
  }
  options->role = FLAGS_role;
  if (FLAGS_local_addr.find_first_of(" \t\n/") != std::string::npos) {
    throw UsageError(Quoted("local_addr", FLAGS_local_addr) + ": expected a host name or address");
  }
  options->local_addr = FLAGS_local_addr;
}

// Single node: a fresh secret per run unless one is given. Multi-node: the
// nodes must share one, so it can only come from outside.
void ResolveRunToken(LaunchOptions* options) {
  if (!options->run_token.empty()) return;
  if (!options->multi_node()) {
    options->run_token = rendezvous::NewRunToken();
  } else if (!options->dry_run) {
    fprintf(stderr,
            "infini_run: warning: no run secret (--rdzv_conf=token_file=PATH or "
            "INFINI_RUN_TOKEN): the rendezvous store at %s:%u accepts anyone who can reach it\n",
            OneLine(options->rendezvous_host).c_str(),
            static_cast<unsigned>(options->rendezvous_port));
  }
}

void ResolveDeviceIsolation(LaunchOptions* options) {
  options->isolate_devices = FLAGS_isolate_devices;
  if (!options->isolate_devices) return;
  options->visibility_variable =
      BackendVisibilityVariable(ExecutableDirectory(), options->ccl_backend);
  if (options->visibility_variable.empty()) {
    fprintf(stderr,
            "infini_run: --isolate_devices: the backend '%s' names no visibility variable; every "
            "rank sees every device\n",
            OneLine(options->ccl_backend).c_str());
    return;
  }
  const char* inherited = getenv(options->visibility_variable.c_str());
  if (inherited && *inherited) {
    options->visible_devices = SplitList(inherited, ',');
    if (options->visible_devices.size() < static_cast<size_t>(options->processes_per_node)) {
      throw UsageError("--isolate_devices: " + options->visibility_variable + "='" +
                       OneLine(inherited) + "' lists " +
                       std::to_string(options->visible_devices.size()) +
                       " device(s), expected at least --nproc_per_node=" +
                       std::to_string(options->processes_per_node));
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
  options->nnodes = ParseIntFlag("nnodes", nnodes, 1, 1 << 20, "a number of nodes in 1..1048576");

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
    const char* from_environment = getenv(env::kBackend);
    options->ccl_backend = from_environment && *from_environment ? from_environment : "auto";
  }
  if (options->ccl_backend.find_first_of(" \t\n=") != std::string::npos) {
    throw UsageError(Quoted("ccl_backend", options->ccl_backend) +
                     ": expected a backend name (nccl, gloo, auto) or a plugin path");
  }

  ValidateRendezvous(options);
  options->max_restarts =
      ParseIntFlag("max_restarts", FLAGS_max_restarts, 0, 1000000, "a count in 0..1000000");
  options->monitor_interval = ParseSecondsFlag("monitor_interval", FLAGS_monitor_interval, false);
  options->term_timeout = ParseSecondsFlag("term_timeout", FLAGS_term_timeout, true);
  options->dry_run = FLAGS_dry_run;
  // For tests of the fallback, and for hosts where a namespace is unwanted.
  const char* pid_namespace = getenv("INFINI_RUN_PID_NAMESPACE");
  options->use_pid_namespace = !(pid_namespace && std::string(pid_namespace) == "0");

  options->processes_per_node =
      ResolveProcessesPerNode(FLAGS_nproc_per_node, ExecutableDirectory(), options->ccl_backend);
  const long long world_size =
      static_cast<long long>(options->nnodes) * options->processes_per_node;
  if (world_size > INT_MAX) {
    throw UsageError("--nnodes=" + std::to_string(options->nnodes) +
                     " x --nproc_per_node=" + std::to_string(options->processes_per_node) + " = " +
                     std::to_string(world_size) + " ranks: expected at most " +
                     std::to_string(INT_MAX));
  }
  ValidateTorchrunOnlyFlags(options);
  ResolveRunToken(options);
  ResolveDeviceIsolation(options);
  ValidateOutput(options);
  ResolveProgram(options);
  return true;
}

}  // namespace infini::launch
