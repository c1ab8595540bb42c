// ccl_info is what a vendor runs first: it must load a plugin and say what it
// is, or print the loader's one-line error and exit 1.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <array>
#include <filesystem>
#include <string>

namespace {

struct Result {
  int exit_code = -1;
  std::string output;
};

// Runs ccl_info with `arguments`, after the shell assignments `environment`.
Result RunCclInfo(const std::string& arguments, const std::string& environment = "") {
  const std::string command =
      environment + " " + std::string(INFINI_CCL_BIN_DIR) + "/ccl_info " + arguments + " 2>&1";
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 512> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) result.output += buffer.data();
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(CclInfo, PrintsWhatTheBackendIs) {
  const Result result =
      RunCclInfo("--ccl_backend=" INFINI_CCL_TEST_PLUGIN_DIR "/libinfini_ccl_mock.so");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("backend:      mock"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("abi version:  2"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("unique id:    4108 bytes"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("devices:      1"), std::string::npos) << result.output;
}

// A profiler table the host cannot read costs the trace the plugin's events,
// in one line, and nothing else; without tracing it is not even read.
TEST(CclInfo, UnreadableProfilerTableIsOneLineAndTheBackendLoads) {
  const std::string plugin =
      "--ccl_backend=" INFINI_CCL_TEST_PLUGIN_DIR "/libinfini_ccl_mock_bad_profiler.so";
  const Result traced = RunCclInfo(plugin, "INFINI_CCL_TRACE_DIR=" + ::testing::TempDir());
  EXPECT_EQ(traced.exit_code, 0) << traced.output;
  EXPECT_NE(traced.output.find("libinfini_ccl_mock_bad_profiler.so: infiniCclProfiler_v1 has "
                               "struct_size 24 and version 7, expected version 1 with a "
                               "set_callback entry; the trace goes on without the plugin's events"),
            std::string::npos)
      << traced.output;
  EXPECT_NE(traced.output.find("backend:      mock"), std::string::npos) << traced.output;
  const Result untraced = RunCclInfo(plugin);
  EXPECT_EQ(untraced.exit_code, 0) << untraced.output;
  EXPECT_EQ(untraced.output.find("infiniCclProfiler_v1"), std::string::npos) << untraced.output;
}

TEST(CclInfo, PrintsOnlyTheDeviceCountWhenAsked) {
  const Result result = RunCclInfo("--device_count --ccl_backend=" INFINI_CCL_TEST_PLUGIN_DIR
                                   "/libinfini_ccl_mock.so");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.output, "1\n");
}

TEST(CclInfo, PrintsTheVisibilityVariableAndCapabilities) {
  const std::string mock = "--ccl_backend=" INFINI_CCL_TEST_PLUGIN_DIR "/libinfini_ccl_mock.so";
  Result result = RunCclInfo("--visibility_variable " + mock);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.output, "MOCK_VISIBLE_DEVICES\n");
  result = RunCclInfo("--capabilities " + mock);
  EXPECT_EQ(result.exit_code, 0);
  // Declared: reductions on float32 and int32 without avg; no all_to_all.
  EXPECT_NE(result.output.find("all_reduce: int32(sum,prod,max,min) float32(sum,prod,max,min)\n"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("all_to_all: not implemented"), std::string::npos) << result.output;
}

TEST(CclInfo, SaysWhetherThePluginCanShrinkAndRevoke) {
  Result result = RunCclInfo("--ccl_backend=" INFINI_CCL_TEST_PLUGIN_DIR "/libinfini_ccl_mock.so");
  EXPECT_NE(result.output.find("shrink=yes revoke=yes\n"), std::string::npos) << result.output;
  result =
      RunCclInfo("--ccl_backend=" INFINI_CCL_TEST_PLUGIN_DIR "/libinfini_ccl_mock_pre_shrink.so");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("shrink=no revoke=no\n"), std::string::npos) << result.output;
}

TEST(CclInfo, SaysWhetherThePluginCanRegisterBuffers) {
  const Result result =
      RunCclInfo("--ccl_backend=" INFINI_CCL_TEST_PLUGIN_DIR "/libinfini_ccl_mock.so");
  EXPECT_NE(result.output.find("              register=no register_windows=no link_bandwidth=no\n"),
            std::string::npos)
      << result.output;
}

TEST(CclInfo, VersionOnePluginIsShownAsAdapted) {
  const Result result =
      RunCclInfo("--ccl_backend=" INFINI_CCL_TEST_PLUGIN_DIR "/libinfini_ccl_mock_v1.so");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("abi version:  1, adapted"), std::string::npos) << result.output;
}

TEST(CclInfo, AutoPicksTheFirstInstalledAcceleratorThatSeesADevice) {
  // The test plugins' folder holds host plugins (mock*), broken ones, and
  // kvtest, an accelerator-shaped plugin (kDLExtDev) with 8 devices: auto
  // passes over the host and broken ones and takes kvtest.
  if (!std::filesystem::exists(INFINI_CCL_TEST_PLUGIN_DIR "/libinfini_ccl_kvtest.so") ||
      !std::filesystem::exists(INFINI_CCL_BIN_DIR "/../lib/libinfini_ccl_gloo.so")) {
    GTEST_SKIP()
        << "needs the kvtest plugin (conformance layer) and the gloo backend in this build";
  }
  const std::string plugin_path = "INFINI_CCL_PLUGIN_PATH=" INFINI_CCL_TEST_PLUGIN_DIR;
  Result result = RunCclInfo("--ccl_backend=auto", plugin_path);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("backend:      kvtest"), std::string::npos) << result.output;
  // With no accelerator visible, auto falls back to the host backend.
  result = RunCclInfo("--ccl_backend=auto", "KVTEST_VISIBLE_DEVICES= " + plugin_path);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("backend:      gloo"), std::string::npos) << result.output;
}

TEST(CclInfo, SaysWhetherThePluginAllowsOneRankPerProcess) {
  const Result result = RunCclInfo("--capabilities --ccl_backend=" INFINI_CCL_TEST_PLUGIN_DIR
                                   "/libinfini_ccl_mock.so");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("              one_rank_per_process=no\n"), std::string::npos)
      << result.output;
}

#ifdef TEMPLATE_PLUGIN_PATH
// The untouched template: what was loaded, then every entry that is left,
// in the template's own words, not only the first one met.
TEST(CclInfo, AnUnfilledTemplateSaysWhatItLoadedAndWhatIsLeft) {
  const Result result = RunCclInfo("--ccl_backend=" TEMPLATE_PLUGIN_PATH);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  for (const char* expected :
       {"backend:      template\n", "version:      template 0 (no vendor library yet)\n",
        "devices:      unknown (get_device_count failed)\n", "left to implement:\n",
        "  template get_device_count failed: infiniCclUnsupported: template: implement "
        "get_device_count",
        "  template get_device failed: infiniCclUnsupported: template: implement get_device",
        "  supports() declares no type for all_reduce, broadcast, reduce, all_gather, "
        "reduce_scatter, send, recv (docs/porting.md step 4)"}) {
    EXPECT_NE(result.output.find(expected), std::string::npos) << expected << "\n" << result.output;
  }
}
#endif

TEST(CclInfo, MissingBackendIsOneLineAndExitOne) {
  const Result result = RunCclInfo("--ccl_backend=nosuchvendor");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.output.find('\n'), result.output.size() - 1) << result.output;
  EXPECT_NE(result.output.find("ccl_info: backend 'nosuchvendor' not found"), std::string::npos)
      << result.output;
}

}  // namespace
