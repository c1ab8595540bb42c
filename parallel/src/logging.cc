#include "infini/parallel/logging.h"

#include <unistd.h>

#include <mutex>

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

}  // namespace

void SetLogIdentity(const Rank& rank) {
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
    if (!google::IsGoogleLoggingInitialized()) google::InitGoogleLogging("infini_parallel");
    const std::string base = log_dir + "/proc" + std::to_string(rank.global_proc_rank()) + ".";
    for (google::LogSeverity severity :
         {google::GLOG_INFO, google::GLOG_WARNING, google::GLOG_ERROR, google::GLOG_FATAL}) {
      google::SetLogDestination(severity,
                                (base + google::GetLogSeverityName(severity) + ".").c_str());
    }
  });
}

}  // namespace infini::parallel
