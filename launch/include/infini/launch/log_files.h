// Per-rank log files under LOG_DIR/RUN_ID/attempt_K/rank_N/, made so that
// another user or another run cannot redirect or clobber them: every folder
// below LOG_DIR is opened relative to its parent's descriptor without
// following symlinks, folders are 0700, files 0600 and created exclusively
// (an earlier run's files are never truncated).
#pragma once

#include <string>

namespace infini::launch {

struct RankLogFiles {
  int stdout_fd = -1;
  int stderr_fd = -1;
};

class RunLogFolder {
 public:
  // Opens (creating, 0700) LOG_DIR and LOG_DIR/RUN_ID. Throws LaunchError.
  RunLogFolder(const std::string& log_dir, const std::string& run_id);
  ~RunLogFolder();
  RunLogFolder(const RunLogFolder&) = delete;
  RunLogFolder& operator=(const RunLogFolder&) = delete;

  const std::string& RunPath() const { return run_path_; }  // LOG_DIR/RUN_ID
  std::string AttemptPath(int attempt) const;
  // Makes attempt_K/rank_N, refusing one that exists (another run with the
  // same run id wrote there), and creates its two files. Throws LaunchError.
  RankLogFiles CreateRankFiles(int attempt, int global_rank);

 private:
  std::string run_path_;
  int run_fd_ = -1;
};

// Where --tee/--redirects write without --log_dir: $XDG_RUNTIME_DIR/infini_run
// when it is a folder private to this user, else ~/.cache/infini_run/logs.
std::string PrivateDefaultLogDir();

}  // namespace infini::launch
