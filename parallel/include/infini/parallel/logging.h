// glog helpers for ranks. Every line says which rank wrote it:
//
//   INFINI_LOG(INFO) << "step " << step;        // "[rank 3 local 1 pid 4242] step 7"
//   INFINI_LOG_RANK0(INFO) << "loss " << loss;  // written by global rank 0 only
//
// Context::Create sets the calling thread's identity. With
// INFINI_CCL_LOG_DIR=<dir>, each process also writes its glog files as
// <dir>/proc<global process rank>.<SEVERITY>.<run id>.attempt<K>.* under
// infini_run (thread ranks of one process share the file; the prefix tells
// them apart).
#pragma once

#include <glog/logging.h>

#include <string>

#include "infini/parallel/rank.h"

namespace infini::parallel {

// The calling thread now logs as `rank`.
void SetLogIdentity(const Rank& rank);
// "[rank 3 local 1 pid 4242] ", or "[pid 4242] " before SetLogIdentity.
const std::string& LogPrefix();
// Whether the calling thread is global rank 0 (true before SetLogIdentity,
// so a program's early lines are not lost).
bool IsMainRankThread();
// Sends this process's glog files to `log_dir` (initializing glog if the
// program did not). Idempotent.
void EnableRankLogFile(const Rank& rank, const std::string& log_dir);

}  // namespace infini::parallel

#define INFINI_LOG(severity) LOG(severity) << ::infini::parallel::LogPrefix()
#define INFINI_LOG_RANK0(severity) \
  LOG_IF(severity, ::infini::parallel::IsMainRankThread()) << ::infini::parallel::LogPrefix()
