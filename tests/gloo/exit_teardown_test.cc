// Communicators kept in a static singleton until exit (what InfiniTrain's
// ProcessGroupFactory does) end cleanly: the exit hook that the first
// Backend::Load registers runs before such statics are destroyed, and from
// then on no Communicator calls the plugin (ccl.h, "At process exit").
// Runs exit_teardown_program as a child process.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace {

struct Result {
  int exit_code = -1;
  std::string output;
};

Result RunProgram(const std::string& arguments) {
  const std::string command =
      "timeout -k 5 60 " + std::string(EXIT_TEARDOWN_PROGRAM) + " " + arguments + " 2>&1";
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, got);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ExitTeardown, GlooCommunicatorsInAStaticSingletonExitCleanly) {
  const Result result = RunProgram("gloo 2");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Contains(result.output, "main returns with 2 communicators in a static"))
      << result.output;
  // Nothing after main: no crash report, no sanitizer, no terminate.
  EXPECT_EQ(result.output.find('\n'), result.output.size() - 1) << result.output;
}

#ifdef MOCK_PLUGIN_PATH
TEST(ExitTeardown, CommunicatorInAStaticMadeBeforeTheLoadIsNotDestroyedThroughThePlugin) {
  const Result result = RunProgram(std::string(MOCK_PLUGIN_PATH) + " 1");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Contains(result.output, "comm_destroy calls in main: 0, after main: 0"))
      << result.output;
}

TEST(ExitTeardown, CommunicatorInAStaticMadeAfterTheLoadIsDestroyedBeforeTheHookRuns) {
  // A function-local static first used after the load is destroyed before
  // the hook: through the plugin, whose runtime is then still there.
  const Result result = RunProgram(std::string(MOCK_PLUGIN_PATH) + " 1 late");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Contains(result.output, "comm_destroy calls in main: 0, after main: 1"))
      << result.output;
}

TEST(ExitTeardown, CommunicatorDestroyedInMainIsDestroyedOnce) {
  const Result result = RunProgram(std::string(MOCK_PLUGIN_PATH) + " 1 reset");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Contains(result.output, "comm_destroy calls in main: 1, after main: 0"))
      << result.output;
}
#endif

}  // namespace
