// A backend per device type in one process (issue 35 item 3), as a
// framework names them: infini_run --ccl_backend=cpu:gloo,ext_dev:gloo+<arena>
// examples/framework_adapter keeping one CclImpl per device type, and a
// parallel/ program whose process group routes each call. Host
// tensors' collectives go to gloo, the arena's to gloo staged through the
// arena (its copy count says which ran); a tensor on a type the list does not
// name is one line; ccl_info shows the list.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "../examples/program_runner.h"

namespace {

using infini::examples::gpt2::testing::RunCommand;
using RunResult = infini::examples::gpt2::testing::Result;

const std::string kArena = ARENA_PLUGIN_PATH;
const std::string kBoth = "cpu:gloo,ext_dev:gloo+" + kArena;

RunResult RunAdapter(const std::string& ccl_backend, const std::string& program_flags) {
  return RunCommand("ARENA_COUNT_COPIES=1 " + std::string(INFINI_RUN_PATH) +
                    " --nproc_per_node=2 --ccl_backend=" + ccl_backend + " -- " +
                    FRAMEWORK_ADAPTER_PATH + " " + program_flags);
}

bool Has(const std::string& output, const std::string& text) {
  return output.find(text) != std::string::npos;
}

TEST(DeviceBackends, HostTensorsGoToGlooAndArenaTensorsToTheStagedBackend) {
  const RunResult run = RunAdapter(kBoth, "");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string layout = "2 ranks (2 processes x 1 threads), ";
  EXPECT_TRUE(Has(run.output, layout + "tensors on cpu, backend gloo, "
                                       "GroupStart/CommInitRank/GroupEnd: all collectives correct"))
      << run.output;
  EXPECT_TRUE(Has(run.output, layout + "tensors on ext_dev, backend gloo+arena, "
                                       "GroupStart/CommInitRank/GroupEnd: all collectives correct"))
      << run.output;
  EXPECT_FALSE(Has(run.output, "arena: 0 copies")) << run.output;
}

TEST(DeviceBackends, HostTensorsAloneMakeNoArenaCopies) {
  const RunResult run = RunAdapter(kBoth, "--tensor_devices=cpu");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "tensors on cpu, backend gloo, ")) << run.output;
  EXPECT_FALSE(Has(run.output, "tensors on ext_dev")) << run.output;
  // The arena is loaded (the list names it) but moved no byte.
  EXPECT_TRUE(Has(run.output, "[rank0]:arena: 0 copies")) << run.output;
  EXPECT_TRUE(Has(run.output, "[rank1]:arena: 0 copies")) << run.output;
}

TEST(DeviceBackends, ATensorOnATypeNoBackendServesIsOneLine) {
  const RunResult run = RunAdapter("cpu:gloo", "--tensor_devices=ext_dev");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(Has(run.output,
                  "framework_adapter: no backend for tensors on ext_dev in 'cpu:gloo' (it serves "
                  "cpu): expected a TYPE:BACKEND entry for it (ext_dev:NAME in --ccl_backend)\n"))
      << run.output;
}

RunResult RunGroups(const std::string& ccl_backend, const std::string& program_flags) {
  return RunCommand("ARENA_COUNT_COPIES=1 " + std::string(INFINI_RUN_PATH) +
                    " --nproc_per_node=2 --ccl_backend=" + ccl_backend + " -- " +
                    DEVICE_GROUPS_PROGRAM_PATH + " " + program_flags);
}

TEST(DeviceBackends, AProcessGroupSendsEachTensorToTheBackendOfItsDevice) {
  const RunResult run = RunGroups(kBoth, "");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "[rank0]:device_groups: cpu tensors summed on gloo\n")) << run.output;
  EXPECT_TRUE(Has(run.output, "[rank1]:device_groups: ext_dev tensors summed on gloo+arena\n"))
      << run.output;
  EXPECT_FALSE(Has(run.output, "arena: 0 copies")) << run.output;
}

TEST(DeviceBackends, AProcessGroupWithHostTensorsAloneMakesNoArenaCopies) {
  const RunResult run = RunGroups(kBoth, "--tensors=host");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "[rank0]:arena: 0 copies")) << run.output;
  EXPECT_TRUE(Has(run.output, "[rank1]:arena: 0 copies")) << run.output;
}

TEST(DeviceBackends, AProcessGroupGivenATensorOfAnUnservedTypeSaysSoInOneLine) {
  const RunResult run = RunGroups(kBoth, "--tensors=unserved");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(Has(run.output,
                  "device_groups: all_reduce on process group 'world': no backend for tensors on "
                  "opencl (the group serves ext_dev, cpu): expected a TYPE:BACKEND entry for it "
                  "in INFINI_CCL_BACKEND\n"))
      << run.output;
}

TEST(DeviceBackends, CclInfoShowsTheBackendOfEachDeviceType) {
  const RunResult run = RunCommand(std::string(CCL_INFO_PATH) + " --ccl_backend=" + kBoth);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Has(run.output, "backend:      gloo+arena\n")) << run.output;  // the accelerator's
  EXPECT_TRUE(Has(run.output, "tensors on cpu: gloo (")) << run.output;
  EXPECT_TRUE(Has(run.output, "tensors on ext_dev: gloo+arena (")) << run.output;
}

TEST(DeviceBackends, AWrongListIsOneLine) {
  for (const auto& [spelling, expected] : std::vector<std::pair<std::string, std::string>>{
           {"cpu:gloo,cpu:gloo",
            "device type 'cpu' is named twice: expected one backend per "
            "device type"},
           {"cpu:gloo,gpu:gloo",
            "unknown device type 'gpu' in entry 'gpu:gloo': expected one of "
            "cpu, cuda,"},
           {"ext_dev:gloo", "gloo keeps its buffers on cpu, not ext_dev (entry 'ext_dev:gloo')"},
           {"cpu:", "entry 'cpu:': expected TYPE:BACKEND (cpu:gloo,cuda:nccl)"}}) {
    const RunResult run =
        RunCommand(std::string(CCL_INFO_PATH) + " --ccl_backend='" + spelling + "'");
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_EQ(run.output.rfind("ccl_info: --ccl_backend='" + spelling + "': ", 0), 0u)
        << run.output;
    EXPECT_TRUE(Has(run.output, expected)) << run.output;
    EXPECT_EQ(run.output.find('\n'), run.output.size() - 1) << run.output;
  }
}

// A device plugin that does not load names the pair it was to stage, so a
// per-rank --device_backend entry or a TRANSPORT+DEVICE spelling is found.
TEST(DeviceBackends, AStagingDeviceThatDoesNotLoadIsNamedAsSuch) {
  const RunResult run = RunCommand(std::string(CCL_INFO_PATH) + " --ccl_backend=gloo+arenaa");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(
      run.output.rfind("ccl_info: staging gloo through 'arenaa': backend 'arenaa' not found", 0),
      0u)
      << run.output;
  EXPECT_EQ(run.output.find('\n'), run.output.size() - 1) << run.output;
}

TEST(DeviceBackends, InfiniRunHelpShowsTheSpelling) {
  const RunResult run = RunCommand(std::string(INFINI_RUN_PATH) + " --help");
  EXPECT_TRUE(Has(run.output, "cpu:gloo,cuda:nccl")) << run.output;
}

}  // namespace
