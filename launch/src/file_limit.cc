#include "infini/launch/file_limit.h"

namespace infini::launch {
namespace {

// Written once before threads start; read in forked children.
rlimit original_limit{};
bool raised = false;

}  // namespace

rlim_t RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  original_limit = limit;
  if (limit.rlim_cur >= limit.rlim_max) return limit.rlim_cur;
  rlimit wanted = limit;
  wanted.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &wanted) != 0) return limit.rlim_cur;
  raised = true;
  return wanted.rlim_cur;
}

void RestoreOpenFileLimitInChild() {
  if (raised) setrlimit(RLIMIT_NOFILE, &original_limit);
}

}  // namespace infini::launch
