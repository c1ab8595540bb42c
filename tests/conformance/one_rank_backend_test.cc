// parallel/ on a backend that allows one rank per process: a thread layout
// is one line naming the flag and the backend, before anything connects.
#include <gtest/gtest.h>

#include <string>

#include "infini/parallel/context.h"
#include "infini/parallel/errors.h"

namespace {

TEST(OneRankPerProcessBackend, ThreadLayoutIsRefusedNamingTheFlagAndTheBackend) {
  infini::parallel::ContextOptions options;
  options.threads_per_process = 2;
  options.backend = KVTEST_ONE_PLUGIN_PATH;
  options.environment = infini::parallel::Environment{};
  try {
    infini::parallel::Context::Create(options);
    FAIL() << "two ranks per process were accepted on a one-rank-per-process backend";
  } catch (const infini::parallel::ParallelConfigError& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("--nthread_per_process=2"), std::string::npos) << text;
    EXPECT_NE(text.find("backend 'kvtest'"), std::string::npos) << text;
    EXPECT_NE(text.find("INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS"), std::string::npos) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  }
}

}  // namespace
