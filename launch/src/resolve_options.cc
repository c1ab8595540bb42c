// infini_run's parsed command line completed from the machine (torchrun's
// config_from_args after parse_args): the backend from the environment, the
// run's id and secret, the process count of gpu/cpu/auto (asking
// bin/ccl_info), device isolation, the default log folder and the program's
// path. Parsing itself is command_line.cc's.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>

#include "infini/common/launch_env.h"
#include "infini/launch/device_count.h"
#include "infini/launch/log_files.h"
#include "infini/launch/net_util.h"
#include "infini/launch/options.h"
#include "infini/launch/run_decisions.h"
#include "infini/rendezvous/run_token.h"
#include "option_checks.h"

namespace infini::launch {
namespace {

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
  std::string program = options->program_argv[0];
  if (options->python_module) {
    bool unused = false;
    std::string python = FindExecutable("python3", &unused);
    if (python.empty()) throw UsageError("--module needs python3 in PATH");
    options->program_argv.insert(options->program_argv.begin(), {"python3", "-u", "-m"});
    options->program_path = python;
    return;
  }
  bool is_python_script =
      !options->no_python &&
      (options->python_run_path ||
       (program.size() > 3 && program.compare(program.size() - 3, 3, ".py") == 0));
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

// The secret from --rdzv_conf=token_file or INFINI_RUN_TOKEN. Else, single
// node: a fresh one per run; multi-node: the nodes must share one, so it can
// only come from outside.
void ResolveRunToken(LaunchOptions* options) {
  options->run_token = options->run_token_file.empty() ? rendezvous::RunTokenFromEnvironment()
                                                       : ReadTokenFile(options->run_token_file);
  if (options->run_token.find_first_of("\n\r") != std::string::npos) {
    throw UsageError("the run's secret (INFINI_RUN_TOKEN or token_file) holds a line break");
  }
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

// NCCL refuses two ranks on one GPU, in every rank; say it once, before
// starting any, with the staged alternative. `devices`: ccl_info's count.
void RefuseSharedNcclDevices(const LaunchOptions& options, int devices) {
  const char* device_backend = getenv(env::kDeviceBackend);
  const char* sharing = getenv("INFINI_CCL_ALLOW_DEVICE_SHARING");
  if (options.ccl_backend != "nccl" || (device_backend && *device_backend) ||
      options.isolate_devices || (sharing && *sharing && *sharing != '0')) {
    return;
  }
  if (devices < 1 || devices >= options.processes_per_node) return;
  throw UsageError("--ccl_backend=nccl --nproc_per_node=" +
                   std::to_string(options.processes_per_node) + ": NCCL needs one GPU per rank, " +
                   std::to_string(devices) + " visible; to run several ranks on one GPU, use " +
                   "--ccl_backend=gloo --device_backend=nccl (host-staged collectives)");
}

// A device backend with no device here, or NCCL with fewer GPUs than ranks,
// fails in every rank with the same line: the launcher says it once, before
// starting any. One ccl_info call; a one-rank launch pays none (its one rank
// says it once anyway, and a CUDA start-up is not spent twice).
void CheckDevicesBeforeStarting(const LaunchOptions& options) {
  if (options.dry_run || options.processes_per_node < 2 || options.ccl_backend == "gloo" ||
      options.ccl_backend == "auto") {
    return;
  }
  const int devices = VisibleDeviceCount(ExecutableDirectory(), options.ccl_backend);
  if (devices < 0) return;  // ccl_info cannot say: the ranks will
  if (devices == 0) {
    const std::string variable =
        BackendVisibilityVariable(ExecutableDirectory(), options.ccl_backend);
    const char* visible = variable.empty() ? nullptr : getenv(variable.c_str());
    throw LaunchError("--ccl_backend=" + OneLine(options.ccl_backend) +
                      ": the backend sees no device on this machine (ccl_info --device_count: 0" +
                      (visible ? "; " + variable + "='" + OneLine(visible) + "'" : "") +
                      "): expected at least one; run where its devices are, or use "
                      "--ccl_backend=gloo for CPUs");
  }
  RefuseSharedNcclDevices(options, devices);
}

// INFINI_RUN_WAITING_NOTE_S: how often a waiting launcher says whom it
// waits for (tests shorten torchrun users' 30 s).
void ResolveWaitingNoteInterval(LaunchOptions* options) {
  const char* text = getenv("INFINI_RUN_WAITING_NOTE_S");
  if (!text || !*text) return;
  char* end = nullptr;
  const double seconds = strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds > 0) || seconds >= 1e7) {
    throw UsageError(std::string("INFINI_RUN_WAITING_NOTE_S='") + OneLine(text) +
                     "': expected seconds between notes of a waiting launcher, above 0 and below "
                     "10^7");
  }
  options->waiting_note_interval =
      std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(seconds * 1000)));
}

}  // namespace

std::string ExecutableDirectory() {
  char path[4096];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return ".";
  std::string executable(path, static_cast<size_t>(length));
  return executable.substr(0, executable.rfind('/'));
}

void ResolveLaunchOptions(LaunchOptions* options) {
  // The one place that decides which modes run (run_decisions.h).
  if (std::optional<std::string> refused = decisions::RefusedMode(decisions::ModeOf(*options))) {
    throw UsageError(*refused);
  }
  if (options->ccl_backend.empty()) {
    const char* from_environment = getenv(env::kBackend);
    options->ccl_backend = from_environment && *from_environment ? from_environment : "auto";
    CheckBackendName(options->ccl_backend);
  }
  // The parser exports --device_backend for the ccl_info calls; the ranks
  // get it from the options (child_env.h), like every variable of theirs.
  if (const char* device_backend = getenv(env::kDeviceBackend)) {
    options->device_backend = device_backend;
  }
  if (options->run_id.empty()) options->run_id = GenerateRunId();
  ResolveWaitingNoteInterval(options);
  // For tests of the fallback, and for hosts where a namespace is unwanted.
  const char* pid_namespace = getenv("INFINI_RUN_PID_NAMESPACE");
  options->use_pid_namespace = !(pid_namespace && std::string(pid_namespace) == "0");
  if (options->processes_per_node == 0) {
    options->processes_per_node = ResolveProcessesPerNode(
        options->processes_per_node_spec, ExecutableDirectory(), options->ccl_backend);
    CheckAgainstProcessCount(*options);
  }
  CheckDevicesBeforeStarting(*options);
  ResolveRunToken(options);
  ResolveDeviceIsolation(options);
  if (options->WantsLogFiles() && options->log_dir.empty()) {
    // Never a shared temporary folder: another user could plant symlinks
    // there or read the logs.
    options->log_dir = PrivateDefaultLogDir();
  }
  ResolveProgram(options);
}

}  // namespace infini::launch
