// infini_run's command line, parsed: argv (and torchrun's PET_<FLAG>
// defaults, when an environment is passed) -> LaunchOptions with every check
// that needs no process or file, so it is fuzzed as it is
// (fuzz/command_line_fuzz.cc). The syntax (spellings, letters, PET_, did you
// mean) is the one parser's, infini/common/command_line.h. What needs the machine (the
// process count of gpu/cpu/auto, the program's path, the run's secret and
// id, device isolation) is resolve_options.cc's.
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include "flag_definitions.h"
#include "infini/common/device_backend_choice.h"
#include "infini/common/launch_env.h"
#include "infini/common/usage.h"
#include "infini/launch/options.h"
#include "option_checks.h"

namespace infini::launch {
namespace {

std::string Quoted(const std::string& flag, const std::string& value) {
  return flags::QuotedFlag(flag, value);
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
    throw UsageError(flags::BadValueMessage(flag, value, expected));
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
        local_rank < 0 || local_rank > INT_MAX || !ParseWholeInt(entry.substr(colon + 1), &code) ||
        code < 0 || code > 3) {
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

using FlagValues = cli::CommandLine;  // each flag's value after argv

bool ParseFlagValues(const FlagValues& flag, LaunchOptions* options);

// torchrun's c10d settings are accepted; ours are honoured; others refused.
// The token file is read by the resolver.
void ParseRendezvousConf(const FlagValues& flag, LaunchOptions* options) {
  static const std::set<std::string> kAcceptedTorchrunKeys = {"read_timeout", "close_timeout",
                                                              "timeout", "is_host", "use_libuv"};
  std::optional<std::chrono::milliseconds> keep_alive_interval;
  std::optional<int> keep_alive_attempts;
  for (const std::string& setting : SplitList(flag["rdzv_conf"], ',')) {
    if (setting.empty()) continue;
    const size_t equals = setting.find('=');
    const std::string key = setting.substr(0, equals);
    const std::string value = equals == std::string::npos ? "" : setting.substr(equals + 1);
    const std::string name = "rdzv_conf " + key;
    if (key == "join_timeout") {
      options->rendezvous_timeout = ParseSecondsFlag(name, value, false);
    } else if (key == "last_call_timeout") {
      options->last_call_timeout = ParseSecondsFlag(name, value, true);
    } else if (key == "heartbeat_timeout") {
      options->heartbeat_timeout = ParseSecondsFlag(name, value, false);
      if (options->heartbeat_timeout < std::chrono::milliseconds(200)) {
        throw UsageError(Quoted("rdzv_conf", setting) + ": expected at least 0.2 seconds");
      }
    } else if (key == "keep_alive_interval") {
      keep_alive_interval = ParseSecondsFlag(name, value, false);
    } else if (key == "keep_alive_max_attempt") {
      keep_alive_attempts = ParseIntFlag(name, value, 1, 1000, "a count in 1..1000");
    } else if (key == "relay") {
      if (value != "0" && value != "1") {
        throw UsageError(Quoted("rdzv_conf", setting) + ": expected relay=0 or relay=1");
      }
      options->relay_store = value == "1";
    } else if (key == "relay_log") {
      if (value.empty()) throw UsageError(Quoted("rdzv_conf", setting) + ": expected a path");
      options->relay_log_path = value;
    } else if (key == "token_file") {
      if (value.empty()) throw UsageError(Quoted("rdzv_conf", setting) + ": expected a path");
      options->run_token_file = value;
    } else if (!kAcceptedTorchrunKeys.count(key) || equals == std::string::npos) {
      throw UsageError(Quoted("rdzv_conf", setting) +
                       ": expected KEY=VALUE with KEY one of join_timeout, heartbeat_timeout, "
                       "keep_alive_interval, keep_alive_max_attempt, token_file, relay, relay_log, "
                       "read_timeout, "
                       "last_call_timeout, close_timeout, timeout, is_host, use_libuv");
    }
  }
  if (keep_alive_interval || keep_alive_attempts) {
    options->heartbeat_timeout =
        keep_alive_interval.value_or(std::chrono::seconds(5)) * keep_alive_attempts.value_or(3);
  }
}

// --rdzv_backend=etcd: HOST[:PORT],... (etcd's client port 2379 by default).
void ParseEtcdEndpoints(const FlagValues& flag, LaunchOptions* options) {
  if (flag["rdzv_endpoint"].empty()) {
    throw UsageError("--rdzv_backend=" + flag["rdzv_backend"] +
                     " needs --rdzv_endpoint=HOST:2379[,HOST:2379...], the etcd members");
  }
  for (const std::string& member : SplitList(flag["rdzv_endpoint"], ',')) {
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

void ParseRendezvous(const FlagValues& flag, LaunchOptions* options) {
  const std::string& backend = flag["rdzv_backend"];
  options->rendezvous_on_etcd = backend == "etcd" || backend == "etcd-v2";
  if (backend != "c10d" && backend != "static" && !options->rendezvous_on_etcd) {
    throw UsageError(Quoted("rdzv_backend", backend) + ": expected c10d, static or etcd (etcd-v2)");
  }
  options->rendezvous_timeout = ParseSecondsFlag("rdzv_timeout", flag["rdzv_timeout"], false);
  ParseRendezvousConf(flag, options);
  if (flag.Switch("standalone")) {
    if (options->nnodes != 1) {
      throw UsageError("--standalone runs a single node, but --nnodes=" +
                       std::to_string(options->nnodes));
    }
    return;  // a free local port, whatever else was given (as torchrun)
  }
  const std::string& endpoint = flag["rdzv_endpoint"];
  const std::string& master_addr = flag["master_addr"];
  const std::string& master_port = flag["master_port"];
  if (options->rendezvous_on_etcd) {
    ParseEtcdEndpoints(flag, options);
  } else if (!endpoint.empty()) {
    ParseEndpoint("rdzv_endpoint", endpoint, 29400, &options->rendezvous_host,
                  &options->rendezvous_port);
  } else if (!master_addr.empty() || !master_port.empty()) {
    options->rendezvous_flags = "--master_addr/--master_port";
    options->rendezvous_host = master_addr.empty() ? "127.0.0.1" : master_addr;
    options->rendezvous_port =
        master_port.empty() ? 29500
                            : static_cast<uint16_t>(ParseIntFlag("master_port", master_port, 1,
                                                                 65535, "a port in 1..65535"));
    if (master_addr.find(':') != std::string::npos && master_addr.find('[') == std::string::npos &&
        master_addr.find("::") == std::string::npos) {
      throw UsageError(Quoted("master_addr", master_addr) +
                       ": expected a host without a port (use --master_port)");
    }
  } else if (options->multi_node()) {
    throw UsageError("--nnodes=" + std::to_string(options->nnodes) +
                     " needs --rdzv_endpoint=HOST[:PORT] (or --master_addr) so the nodes can meet");
  }
  if (options->multi_node() && !options->run_id_given) {
    if (!endpoint.empty() && backend != "static") {
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

// --on_failure and --min_ranks (docs/launcher.md, "In-place recovery").
void ParseOnFailure(const FlagValues& flag, LaunchOptions* options) {
  const std::string& mode = flag["on_failure"];
  if (mode != "restart" && mode != "shrink") {
    throw UsageError(flags::BadValueMessage("on_failure", mode, "'restart' or 'shrink'"));
  }
  options->shrink_on_failure = mode == "shrink";
  options->min_ranks =
      ParseIntFlag("min_ranks", flag["min_ranks"], 1, 1 << 30, "a count of ranks, at least 1");
  if (!options->shrink_on_failure && options->min_ranks != 1) {
    throw UsageError(Quoted("min_ranks", flag["min_ranks"]) +
                     ": expected --on_failure=shrink (it is how few ranks a shrinking run may "
                     "go down to)");
  }
  if (options->shrink_on_failure && options->max_restarts > 0) {
    throw UsageError("--max_restarts=" + std::to_string(options->max_restarts) +
                     " with --on_failure=shrink: expected one of them (shrink goes on in place; "
                     "restarts are --on_failure=restart's)");
  }
}

void ParseOutput(const FlagValues& flag, LaunchOptions* options) {
  options->redirects = ParseStreamSelection("redirects", flag["redirects"]);
  options->tee = ParseStreamSelection("tee", flag["tee"]);
  options->log_dir = flag["log_dir"];
  options->trace_dir = flag["trace_dir"];
  options->comm_summary = flag.Switch("comm_summary");
  if (options->comm_summary && options->trace_dir.empty()) {
    throw UsageError(
        "--comm_summary: expected --trace_dir=DIR too (the summary is read from the ranks' "
        "traces)");
  }
  if (!flag["local_ranks_filter"].empty()) {
    for (const std::string& entry : SplitList(flag["local_ranks_filter"], ',')) {
      options->local_ranks_filter.push_back(ParseIntFlag(
          "local_ranks_filter", entry, 0, INT_MAX,
          "comma-separated local ranks below --nproc_per_node=" + flag["nproc_per_node"]));
    }
  }
}

void ParseTorchrunOnlyFlags(const FlagValues& flag, LaunchOptions* options) {
  const std::string& start_method = flag["start_method"];
  if (start_method != "spawn" && start_method != "fork" && start_method != "forkserver") {
    throw UsageError(Quoted("start_method", start_method) + ": expected spawn, fork or forkserver");
  }
  const std::string& logs_specs = flag["logs_specs"];
  if (!logs_specs.empty() && logs_specs != "default") {
    throw UsageError(Quoted("logs_specs", logs_specs) +
                     ": expected 'default' (infini_run has torchrun's default log layout only)");
  }
  const std::string& role = flag["role"];
  if (role.empty() || role.find_first_of("\n\r=") != std::string::npos) {
    throw UsageError(Quoted("role", role) + ": expected a name");
  }
  options->role = role;
  const std::string& local_addr = flag["local_addr"];
  if (local_addr.find_first_of(" \t\n/") != std::string::npos) {
    throw UsageError(Quoted("local_addr", local_addr) + ": expected a host name or address");
  }
  options->local_addr = local_addr;
}

void ParseProgramForm(const FlagValues& flag, LaunchOptions* options) {
  options->python_module = flag.Switch("module");
  options->python_run_path = flag.Switch("run_path");
  options->no_python = flag.Switch("no_python");
  if (options->python_module && options->no_python) {
    throw UsageError("--module and --no_python exclude each other");
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

bool LaunchOptions::WantsLogFiles() const {
  return redirects.default_code != 0 || tee.default_code != 0 ||
         !redirects.code_by_local_rank.empty() || !tee.code_by_local_rank.empty();
}

std::vector<std::string> SplitList(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, separator)) parts.push_back(part);
  return parts;
}

void CheckBackendName(const std::string& ccl_backend) {
  if (ccl_backend.find_first_of(" \t\n=") != std::string::npos) {
    throw UsageError(Quoted("ccl_backend", ccl_backend) +
                     ": expected a backend name (nccl, gloo, auto) or a plugin path");
  }
}

static device_backend::Choice ParseDeviceBackend(const std::string& text) {
  try {
    return device_backend::Parse(text);
  } catch (const std::invalid_argument& error) {
    throw UsageError(Quoted("device_backend", text) + " (" + env::kDeviceBackend +
                     "): " + error.what());
  }
}

void CheckAgainstProcessCount(const LaunchOptions& options) {
  const long long world_size = static_cast<long long>(options.nnodes) * options.processes_per_node;
  if (world_size > INT_MAX) {
    throw UsageError("--nnodes=" + std::to_string(options.nnodes) +
                     " x --nproc_per_node=" + std::to_string(options.processes_per_node) + " = " +
                     std::to_string(world_size) + " ranks: expected at most " +
                     std::to_string(INT_MAX));
  }
  for (const StreamSelection* selection : {&options.redirects, &options.tee}) {
    for (const auto& [local_rank, code] : selection->code_by_local_rank) {
      if (local_rank >= options.processes_per_node) {
        throw UsageError("--" + std::string(selection == &options.tee ? "tee" : "redirects") +
                         " names local rank " + std::to_string(local_rank) +
                         ", expected ranks below --nproc_per_node=" +
                         std::to_string(options.processes_per_node));
      }
    }
  }
  // Inherited, or from --device_backend (then checked when parsed).
  if (const char* device = getenv(env::kDeviceBackend); device != nullptr && *device != '\0') {
    for (const auto& [local_rank, name] : ParseDeviceBackend(device).by_rank) {
      if (local_rank >= options.processes_per_node) {
        throw UsageError(Quoted("device_backend", device) + " names local rank " +
                         std::to_string(local_rank) + ", expected ranks below --nproc_per_node=" +
                         std::to_string(options.processes_per_node));
      }
    }
  }
  for (int local_rank : options.local_ranks_filter) {
    if (local_rank >= options.processes_per_node) {
      throw UsageError(
          flags::BadValueMessage("local_ranks_filter", std::to_string(local_rank),
                                 "comma-separated local ranks below --nproc_per_node=" +
                                     std::to_string(options.processes_per_node)));
    }
  }
}

bool ParseLaunchCommandLine(int argc, char** argv, LaunchOptions* options,
                            char* const* environment) {
  cli::CommandLine flag = LaunchCommandLine();
  try {
    if (!flag.ParseArgv(argc, argv, environment)) return false;  // --help
  } catch (const cli::UsageError& error) {
    throw UsageError(error.what());
  }
  try {
    return ParseFlagValues(flag, options);
  } catch (const UsageError& error) {
    throw UsageError(flag.NameSources(error.what()));
  }
}

namespace {

bool ParseFlagValues(const FlagValues& flag, LaunchOptions* options) {
  options->program_argv = flag.positional();
  if (flag.Given("dump_stacks")) {
    options->dump_stacks = true;
    options->dump_stacks_run_id = flag["dump_stacks"];
  }
  if (options->dump_stacks) {
    if (!options->dump_stacks_run_id.empty() && !IsSafeRunId(options->dump_stacks_run_id)) {
      throw UsageError(Quoted("dump_stacks", options->dump_stacks_run_id) +
                       ": expected a run id of 1-128 characters of [A-Za-z0-9._-]");
    }
    if (!options->program_argv.empty()) {
      throw UsageError("--dump_stacks asks a live run for its stacks: expected no program, got '" +
                       OneLine(options->program_argv[0]) + "'");
    }
    return true;
  }

  // nnodes: N, or torchrun's MIN:MAX (elastic when MIN < MAX).
  const std::string& nnodes = flag["nnodes"];
  const size_t colon = nnodes.find(':');
  auto node_count = [&](const std::string& part) {
    long long count = 0;
    if (!ParseWholeInt(part, &count) || count < 1 || count > (1 << 20)) {
      throw UsageError(
          flags::BadValueMessage("nnodes", nnodes,
                                 std::string(colon == std::string::npos ? "" : "MIN:MAX, each ") +
                                     "a number of nodes in 1..1048576"));
    }
    return static_cast<int>(count);
  };
  options->nnodes = node_count(colon == std::string::npos ? nnodes : nnodes.substr(colon + 1));
  options->min_nnodes =
      colon == std::string::npos ? options->nnodes : node_count(nnodes.substr(0, colon));
  if (options->min_nnodes > options->nnodes) {
    throw UsageError(Quoted("nnodes", nnodes) + ": expected MIN:MAX with MIN <= MAX");
  }

  if (!flag["node_rank"].empty()) {
    if (options->elastic()) {
      // torchrun accepts it and lets each round number the nodes.
      options->notes.push_back("--node_rank=" + OneLine(flag["node_rank"]) +
                               " is ignored with --nnodes=" + nnodes +
                               ": each round numbers the nodes (as torchrun)");
    } else {
      options->node_rank = ParseIntFlag(
          "node_rank", flag["node_rank"], 0, options->nnodes - 1,
          "a node rank in [0, " + std::to_string(options->nnodes) + ") (below --nnodes)");
    }
  } else if (!options->multi_node()) {
    options->node_rank = 0;
  }

  const std::string& run_id = flag["rdzv_id"];
  options->run_id_given = !run_id.empty() && run_id != "none";
  if (options->run_id_given) {
    if (!IsSafeRunId(run_id)) {
      throw UsageError(Quoted("rdzv_id", run_id) +
                       ": expected 1-128 characters of [A-Za-z0-9._-], not starting with '.'");
    }
    options->run_id = run_id;
  }

  options->ccl_backend = flag["ccl_backend"];
  CheckBackendName(options->ccl_backend);
  // Inherited by the ranks and by the ccl_info this launcher asks.
  if (const std::string& device = flag["device_backend"]; !device.empty()) {
    ParseDeviceBackend(device);
    setenv(env::kDeviceBackend, device.c_str(), 1);
  }

  ParseRendezvous(flag, options);
  options->max_restarts =
      ParseIntFlag("max_restarts", flag["max_restarts"], 0, 1000000, "a count in 0..1000000");
  ParseOnFailure(flag, options);
  options->monitor_interval = ParseSecondsFlag("monitor_interval", flag["monitor_interval"], false);
  options->term_timeout = ParseSecondsFlag("term_timeout", flag["term_timeout"], true);
  options->dry_run = flag.Switch("dry_run");

  // A number is checked here; gpu, cpu and auto need the machine.
  const std::string& processes_per_node = flag["nproc_per_node"];
  options->processes_per_node_spec = processes_per_node;
  if (processes_per_node == "gpu" || processes_per_node == "cpu" || processes_per_node == "auto") {
    options->processes_per_node = 0;
  } else {
    // 65536 processes per node: far above any machine's cores or devices,
    // and nnodes x nproc_per_node stays an int.
    options->processes_per_node = ParseIntFlag("nproc_per_node", processes_per_node, 1, 65536,
                                               "a number in 1..65536, or auto, gpu or cpu");
  }
  ParseTorchrunOnlyFlags(flag, options);
  options->isolate_devices = flag.Switch("isolate_devices");
  ParseOutput(flag, options);
  if (options->processes_per_node > 0) CheckAgainstProcessCount(*options);
  ParseProgramForm(flag, options);
  if (options->program_argv.empty()) {
    throw UsageError(
        "no program given: expected infini_run [FLAGS] [--] PROGRAM [ARGS...] (see --help)");
  }
  return true;
}

}  // namespace

}  // namespace infini::launch
