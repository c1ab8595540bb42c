#include "infini/launch/log_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "infini/launch/options.h"

namespace infini::launch {
namespace {

constexpr mode_t kFolderMode = 0700;
constexpr mode_t kFileMode = 0600;

[[noreturn]] void Fail(const std::string& what, const std::string& path, int error) {
  throw LaunchError("cannot " + what + " " + OneLine(path) + ": " + strerror(error));
}

// mkdir -p for the folder the user named (symlinks in it are the user's own).
void MakePath(const std::string& path) {
  std::string partial;
  for (size_t slash = 0; slash != std::string::npos;) {
    slash = path.find('/', slash + 1);
    partial = path.substr(0, slash);
    if (!partial.empty() && mkdir(partial.c_str(), kFolderMode) != 0 && errno != EEXIST) {
      Fail("create log folder", partial, errno);
    }
  }
}

// Opens `name` below `parent_fd` as a folder, creating it; a symlink is refused.
int OpenOrMakeFolderAt(int parent_fd, const std::string& name, const std::string& path,
                       bool must_be_new) {
  if (mkdirat(parent_fd, name.c_str(), kFolderMode) != 0) {
    if (errno != EEXIST) Fail("create log folder", path, errno);
    if (must_be_new) {
      throw LaunchError("log folder " + OneLine(path) +
                        " already exists: another run with the same --rdzv_id wrote there; logs "
                        "are never overwritten: choose another --rdzv_id or --log_dir");
    }
  }
  int fd = openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    Fail(errno == ELOOP || errno == ENOTDIR ? "use (a symlink or not a folder)" : "open", path,
         errno);
  }
  return fd;
}

int CreateFileAt(int folder_fd, const char* name, const std::string& path) {
  int fd = openat(folder_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, kFileMode);
  if (fd < 0) Fail("create log file", path, errno);
  return fd;
}

bool IsPrivateFolder(const char* path) {
  struct stat info {};
  return path && *path == '/' && lstat(path, &info) == 0 && S_ISDIR(info.st_mode) &&
         info.st_uid == geteuid() && (info.st_mode & 077) == 0;
}

}  // namespace

RunLogFolder::RunLogFolder(const std::string& log_dir, const std::string& run_id)
    : run_path_(log_dir + "/" + run_id) {
  MakePath(log_dir);
  int log_dir_fd = open(log_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (log_dir_fd < 0) Fail("open log folder", log_dir, errno);
  try {
    run_fd_ = OpenOrMakeFolderAt(log_dir_fd, run_id, run_path_, false);
  } catch (...) {
    close(log_dir_fd);
    throw;
  }
  close(log_dir_fd);
}

RunLogFolder::~RunLogFolder() {
  if (run_fd_ >= 0) close(run_fd_);
}

std::string RunLogFolder::AttemptPath(int attempt) const {
  return run_path_ + "/attempt_" + std::to_string(attempt);
}

RankLogFiles RunLogFolder::CreateRankFiles(int attempt, int global_rank) {
  const std::string attempt_name = "attempt_" + std::to_string(attempt);
  const std::string rank_name = "rank_" + std::to_string(global_rank);
  const std::string rank_path = AttemptPath(attempt) + "/" + rank_name;
  int attempt_fd = OpenOrMakeFolderAt(run_fd_, attempt_name, AttemptPath(attempt), false);
  int rank_fd = -1;
  RankLogFiles files;
  try {
    rank_fd = OpenOrMakeFolderAt(attempt_fd, rank_name, rank_path, true);
    files.stdout_fd = CreateFileAt(rank_fd, "stdout.log", rank_path + "/stdout.log");
    files.stderr_fd = CreateFileAt(rank_fd, "stderr.log", rank_path + "/stderr.log");
  } catch (...) {
    if (files.stdout_fd >= 0) close(files.stdout_fd);
    if (rank_fd >= 0) close(rank_fd);
    close(attempt_fd);
    throw;
  }
  close(rank_fd);
  close(attempt_fd);
  return files;
}

std::string PrivateDefaultLogDir() {
  const char* runtime = getenv("XDG_RUNTIME_DIR");
  if (IsPrivateFolder(runtime)) return std::string(runtime) + "/infini_run";
  const char* home = getenv("HOME");
  if (!home || *home != '/') {
    throw UsageError(
        "--tee/--redirects without --log_dir need a private folder: XDG_RUNTIME_DIR and HOME "
        "are unset; give --log_dir");
  }
  return std::string(home) + "/.cache/infini_run/logs";
}

}  // namespace infini::launch
