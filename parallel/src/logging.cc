#include "infini/parallel/logging.h"

#include <errno.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>

#include "infini/common/launch_env.h"

namespace infini::parallel {
namespace {

struct ThreadIdentity {
  bool set = false;
  bool main_rank = true;
  std::string prefix;
};

ThreadIdentity& Identity() {
  thread_local ThreadIdentity identity;
  if (!identity.set && identity.prefix.empty()) {
    identity.prefix = "[pid " + std::to_string(getpid()) + "] ";
  }
  return identity;
}

// glog names a file BASE + YYYYMMDD-HHMMSS.PID. Ranks in infini_run's PID
// namespace have the same small pids in every run, so two runs started in
// one second with one INFINI_CCL_LOG_DIR would claim the same names (glog:
// "COULD NOT CREATE LOGFILE ... File exists", the logs lost): the run id
// and attempt make them the run's own. "" outside a launcher.
std::string RunOfThisProcess() {
  const char* run_id = std::getenv(env::kRunId);
  if (run_id == nullptr || *run_id == '\0') return "";
  std::string run;
  for (const char* c = run_id; *c && run.size() < 128; ++c) {
    run += std::isalnum(static_cast<unsigned char>(*c)) || *c == '-' || *c == '.' ? *c : '_';
  }
  const char* attempt = std::getenv(env::kRestartCount);
  return run + ".attempt" + (attempt && *attempt ? attempt : "0") + ".";
}

// Set when glog was initialized here rather than by the program.
bool g_initialized_here = false;

// A program that never initialized glog would get glog's "Logging before
// InitGoogleLogging() is written to STDERR" on every rank's first line:
// initialize it for the program, logging to stderr as glog does before
// initialization (no files in /tmp).
void InitializeGlogOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (google::IsGoogleLoggingInitialized()) return;
    // glibc's short name of the program (argv[0]'s last part); glog keeps
    // the pointer, which lives as long as the process.
    const char* program = program_invocation_short_name;
    FLAGS_logtostderr = true;
    google::InitGoogleLogging(program != nullptr && *program != '\0' ? program : "infini_parallel");
    g_initialized_here = true;
  });
}

}  // namespace

void SetLogIdentity(const Rank& rank) {
  InitializeGlogOnce();
  ThreadIdentity& identity = Identity();
  identity.set = true;
  identity.main_rank = rank.IsMainRank();
  identity.prefix = "[rank " + std::to_string(rank.global_rank()) + " local " +
                    std::to_string(rank.local_rank()) + " pid " + std::to_string(getpid()) + "] ";
}

const std::string& LogPrefix() { return Identity().prefix; }

bool IsMainRankThread() { return Identity().main_rank; }

void EnableRankLogFile(const Rank& rank, const std::string& log_dir) {
  static std::once_flag once;
  std::call_once(once, [&] {
    InitializeGlogOnce();
    // Files now, as glog writes them once initialized by the program.
    if (g_initialized_here) FLAGS_logtostderr = false;
    const std::string base = log_dir + "/proc" + std::to_string(rank.global_proc_rank()) + ".";
    const std::string run = RunOfThisProcess();
    for (google::LogSeverity severity :
         {google::GLOG_INFO, google::GLOG_WARNING, google::GLOG_ERROR, google::GLOG_FATAL}) {
      google::SetLogDestination(severity,
                                (base + google::GetLogSeverityName(severity) + "." + run).c_str());
    }
  });
}

}  // namespace infini::parallel
