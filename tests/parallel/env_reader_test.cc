#include "infini/parallel/env_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "infini/parallel/errors.h"

namespace infini::parallel {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The one line a ParallelConfigError carries.
std::string ErrorOf(const Environment& environment) {
  try {
    ProcessTopology topology = ReadProcessTopology(environment);
    ReadRuntimeSettings(environment, topology);
  } catch (const ParallelConfigError& error) {
    return error.what();
  }
  return "(no error)";
}

Environment Ours() {
  return {{"GLOBAL_PROC_RANK", "5"}, {"LOCAL_PROC_RANK", "1"}, {"PROC_WORLD_SIZE", "8"},
          {"NNODES", "2"},           {"NPROC_PER_NODE", "4"},  {"MASTER_PORT", "29500"}};
}

Environment Torchrun() {
  return {{"RANK", "6"},           {"LOCAL_RANK", "2"},       {"WORLD_SIZE", "8"},
          {"GROUP_RANK", "1"},     {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node0"},
          {"MASTER_PORT", "29500"}};
}

TEST(EnvReaderTest, NoVariablesMeansOneProcessOnOneNode) {
  ProcessTopology topology = ReadProcessTopology({});
  EXPECT_EQ(topology.nnodes, 1);
  EXPECT_EQ(topology.processes_per_node, 1);
  EXPECT_EQ(topology.global_proc_rank, 0);
  EXPECT_EQ(ReadRuntimeSettings({}, topology).store.kind, StoreLocation::Kind::kInProcess);
}

TEST(EnvReaderTest, ReadsInfiniRunVariables) {
  ProcessTopology topology = ReadProcessTopology(Ours());
  EXPECT_EQ(topology.source, "infini_run");
  EXPECT_EQ(topology.nnodes, 2);
  EXPECT_EQ(topology.processes_per_node, 4);
  EXPECT_EQ(topology.node_rank, 1);
  EXPECT_EQ(topology.local_proc_rank, 1);
  EXPECT_EQ(topology.global_proc_rank, 5);
}

TEST(EnvReaderTest, OurVariablesWinOverTorchrunsAndSchedulers) {
  Environment environment = Ours();
  for (const auto& [name, value] : Torchrun()) environment.emplace(name, value);
  environment["SLURM_PROCID"] = "0";
  EXPECT_EQ(ReadProcessTopology(environment).source, "infini_run");
  EXPECT_EQ(ReadProcessTopology(environment).global_proc_rank, 5);
}

TEST(EnvReaderTest, ReadsTorchrunVariables) {
  ProcessTopology topology = ReadProcessTopology(Torchrun());
  EXPECT_EQ(topology.source, "torchrun");
  EXPECT_EQ(topology.nnodes, 2);
  EXPECT_EQ(topology.processes_per_node, 4);
  EXPECT_EQ(topology.node_rank, 1);
  EXPECT_EQ(topology.local_proc_rank, 2);
  EXPECT_EQ(topology.global_proc_rank, 6);
  RuntimeSettings settings = ReadRuntimeSettings(Torchrun(), topology);
  EXPECT_EQ(settings.store.kind, StoreLocation::Kind::kMaster);
  EXPECT_EQ(settings.store.host, "node0");
  EXPECT_EQ(settings.store.port, 29500);
}

TEST(EnvReaderTest, JoiningIsReadOnlyInAShrinkingRun) {
  Environment environment = Ours();
  environment["MASTER_ADDR"] = "node0";
  environment["INFINI_ON_FAILURE"] = "shrink";
  environment["INFINI_JOINING"] = "2";
  const ProcessTopology topology = ReadProcessTopology(environment);
  EXPECT_EQ(ReadRuntimeSettings(environment, topology).join_notice, 2);
  environment["INFINI_JOINING"] = "0";
  EXPECT_THAT(ErrorOf(environment), HasSubstr("INFINI_JOINING='0': expected a join notice's"));
  environment["INFINI_JOINING"] = "1";
  environment.erase("INFINI_ON_FAILURE");
  EXPECT_THAT(ErrorOf(environment),
              HasSubstr("INFINI_JOINING='1': expected it only with INFINI_ON_FAILURE=shrink"));
}

TEST(EnvReaderTest, ReadsSlurmVariables) {
  Environment environment{{"SLURM_PROCID", "3"},  {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "4"},
                          {"SLURM_NNODES", "2"},  {"SLURM_NODEID", "1"},  {"MASTER_ADDR", "n0"},
                          {"MASTER_PORT", "1234"}};
  ProcessTopology topology = ReadProcessTopology(environment);
  EXPECT_EQ(topology.source, "slurm");
  EXPECT_EQ(topology.processes_per_node, 2);
  EXPECT_EQ(topology.node_rank, 1);
  EXPECT_EQ(topology.global_proc_rank, 3);
}

TEST(EnvReaderTest, RefusesCyclicSlurmPlacement) {
  Environment environment{{"SLURM_PROCID", "1"},
                          {"SLURM_LOCALID", "0"},
                          {"SLURM_NTASKS", "4"},
                          {"SLURM_NNODES", "2"},
                          {"SLURM_NODEID", "1"}};
  EXPECT_THAT(ErrorOf(environment),
              AllOf(HasSubstr("SLURM_PROCID='1'"), HasSubstr("--distribution=block")));
}

TEST(EnvReaderTest, ReadsOpenMpiVariables) {
  Environment environment{{"OMPI_COMM_WORLD_RANK", "5"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                          {"OMPI_COMM_WORLD_SIZE", "8"},
                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}};
  ProcessTopology topology = ReadProcessTopology(environment);
  EXPECT_EQ(topology.source, "openmpi");
  EXPECT_EQ(topology.nnodes, 2);
  EXPECT_EQ(topology.node_rank, 1);
  EXPECT_EQ(topology.local_proc_rank, 1);
}

TEST(EnvReaderTest, ReadsPmiVariablesAsOneNodeWithoutLocalInformation) {
  ProcessTopology topology = ReadProcessTopology({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}});
  EXPECT_EQ(topology.source, "pmi");
  EXPECT_EQ(topology.nnodes, 1);
  EXPECT_EQ(topology.processes_per_node, 4);
  EXPECT_EQ(topology.local_proc_rank, 2);
}

TEST(EnvReaderTest, ReadsPmiVariablesWithHydraLocalRanks) {
  ProcessTopology topology = ReadProcessTopology(
      {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}});
  EXPECT_EQ(topology.nnodes, 2);
  EXPECT_EQ(topology.node_rank, 1);
}

TEST(EnvReaderTest, ErrorNamesVariableValueAndExpectation) {
  Environment environment = Torchrun();
  environment["RANK"] = "abc";
  EXPECT_THAT(ErrorOf(environment),
              AllOf(HasSubstr("RANK='abc'"), HasSubstr("expected a non-negative integer")));
}

TEST(EnvReaderTest, RefusesEveryKindOfBadNumber) {
  for (const char* bad : {"", "-1", "1.5", "+3", " 3", "3 ", "0x10", "99999999999"}) {
    Environment environment = Torchrun();
    environment["LOCAL_RANK"] = bad;
    EXPECT_THAT(ErrorOf(environment), HasSubstr(std::string("LOCAL_RANK='") + bad + "'"))
        << "value '" << bad << "'";
  }
}

TEST(EnvReaderTest, RefusesZeroSizes) {
  Environment environment = Ours();
  environment["NPROC_PER_NODE"] = "0";
  EXPECT_THAT(ErrorOf(environment),
              AllOf(HasSubstr("NPROC_PER_NODE='0'"), HasSubstr("positive integer")));
}

TEST(EnvReaderTest, RefusesRankNotBelowWorldSize) {
  Environment environment = Torchrun();
  environment["RANK"] = "8";
  EXPECT_THAT(ErrorOf(environment), AllOf(HasSubstr("RANK='8'"), HasSubstr("WORLD_SIZE='8'")));
}

TEST(EnvReaderTest, RefusesInconsistentProducts) {
  Environment environment = Ours();
  environment["PROC_WORLD_SIZE"] = "6";
  EXPECT_THAT(ErrorOf(environment),
              AllOf(HasSubstr("PROC_WORLD_SIZE='6'"), HasSubstr("NNODES × NPROC_PER_NODE = 8")));
}

TEST(EnvReaderTest, RefusesWorldSizeNotAMultipleOfLocalWorldSize) {
  Environment environment = Torchrun();
  environment["WORLD_SIZE"] = "7";
  environment["RANK"] = "1";
  environment["LOCAL_RANK"] = "1";
  environment["GROUP_RANK"] = "0";
  EXPECT_THAT(ErrorOf(environment), AllOf(HasSubstr("WORLD_SIZE='7'"),
                                          HasSubstr("not a multiple of LOCAL_WORLD_SIZE='4'")));
}

TEST(EnvReaderTest, RefusesGroupRankThatDisagreesWithRank) {
  Environment environment = Torchrun();
  environment["GROUP_RANK"] = "0";
  EXPECT_THAT(ErrorOf(environment), AllOf(HasSubstr("GROUP_RANK='0'"), HasSubstr("node rank 1")));
}

TEST(EnvReaderTest, RefusesLocalRankThatDisagreesWithGlobalRank) {
  Environment environment = Ours();
  environment["LOCAL_PROC_RANK"] = "2";
  EXPECT_THAT(ErrorOf(environment),
              AllOf(HasSubstr("LOCAL_PROC_RANK='2'"), HasSubstr("expected local rank 1")));
}

TEST(EnvReaderTest, NamesTheMissingVariableOfAFamily) {
  Environment environment = Torchrun();
  environment.erase("LOCAL_WORLD_SIZE");
  EXPECT_THAT(ErrorOf(environment),
              AllOf(HasSubstr("LOCAL_WORLD_SIZE is not set"), HasSubstr("RANK='6'")));
}

TEST(EnvReaderTest, LauncherStoreWinsOverMaster) {
  Environment environment = Torchrun();
  environment["INFINI_STORE_ADDR"] = "10.0.0.1";
  environment["INFINI_STORE_PORT"] = "4000";
  RuntimeSettings settings = ReadRuntimeSettings(environment, ReadProcessTopology(environment));
  EXPECT_EQ(settings.store.kind, StoreLocation::Kind::kLauncher);
  EXPECT_EQ(settings.store.host, "10.0.0.1");
  EXPECT_EQ(settings.store.port, 4000);
}

TEST(EnvReaderTest, RefusesHalfALauncherStore) {
  Environment environment = Torchrun();
  environment["INFINI_STORE_ADDR"] = "10.0.0.1";
  EXPECT_THAT(ErrorOf(environment), AllOf(HasSubstr("INFINI_STORE_PORT is not set"),
                                          HasSubstr("INFINI_STORE_ADDR='10.0.0.1'")));
}

TEST(EnvReaderTest, RefusesBadPort) {
  Environment environment = Torchrun();
  environment["MASTER_PORT"] = "70000";
  EXPECT_THAT(ErrorOf(environment), AllOf(HasSubstr("MASTER_PORT='70000'"), HasSubstr("1..65535")));
}

TEST(EnvReaderTest, SeveralProcessesNeedAStoreAddress) {
  Environment environment = Torchrun();
  environment.erase("MASTER_PORT");
  EXPECT_THAT(ErrorOf(environment),
              AllOf(HasSubstr("MASTER_PORT is not set"), HasSubstr("infini_run")));
  environment["MASTER_PORT"] = "29500";
  environment.erase("MASTER_ADDR");
  EXPECT_THAT(ErrorOf(environment), HasSubstr("MASTER_ADDR is not set"));
}

TEST(EnvReaderTest, ReadsRuntimeSettings) {
  Environment environment = Torchrun();
  environment["INFINI_CCL_TIMEOUT_S"] = "5";
  environment["INFINI_CCL_DEBUG"] = "detail";
  environment["INFINI_CCL_ALLOW_DEVICE_SHARING"] = "1";
  environment["INFINI_CCL_DEVICES_ISOLATED"] = "1";
  environment["TORCHELASTIC_RUN_ID"] = "job42";
  environment["TORCHELASTIC_RESTART_COUNT"] = "2";
  RuntimeSettings settings = ReadRuntimeSettings(environment, ReadProcessTopology(environment));
  EXPECT_EQ(settings.timeout, std::chrono::seconds(5));
  EXPECT_EQ(settings.debug, DebugLevel::kDetail);
  EXPECT_TRUE(settings.allow_device_sharing);
  EXPECT_TRUE(settings.devices_isolated);
  EXPECT_FALSE(ReadRuntimeSettings(Torchrun(), ReadProcessTopology(Torchrun())).devices_isolated);
  EXPECT_EQ(settings.run_id, "job42");
  EXPECT_EQ(settings.restart_count, 2);
  environment["INFINI_RUN_ID"] = "ours";
  EXPECT_EQ(ReadRuntimeSettings(environment, ReadProcessTopology(environment)).run_id, "ours");
}

TEST(EnvReaderTest, DefaultTimeoutIsGenerous) {
  EXPECT_EQ(ReadRuntimeSettings({}, {}).timeout, std::chrono::seconds(kDefaultTimeoutSeconds));
  EXPECT_GE(kDefaultTimeoutSeconds, 300);
}

// How long a rank tries to reach the store: by default as long as its store
// calls may take (INFINI_CCL_TIMEOUT_S + 30 s); a user may shorten it, and
// lengthen it up to there. How often it says it waits: 30 s by default, or
// infini_run's INFINI_RUN_WAITING_NOTE_S, read the way the launcher reads it.
TEST(EnvReaderTest, ReadsTheStoreConnectTimeoutAndTheWaitingNoteInterval) {
  const RuntimeSettings defaults = ReadRuntimeSettings({}, {});
  EXPECT_FALSE(defaults.store_connect_timeout.has_value());
  EXPECT_EQ(defaults.waiting_note_interval, std::chrono::seconds(30));
  EXPECT_EQ(kStoreTimeoutMargin, std::chrono::seconds(30));
  const RuntimeSettings set = ReadRuntimeSettings({{"INFINI_CCL_TIMEOUT_S", "5"},
                                                   {"INFINI_CCL_STORE_CONNECT_TIMEOUT_S", "35"},
                                                   {"INFINI_RUN_WAITING_NOTE_S", "0.5"}},
                                                  {});
  EXPECT_EQ(set.store_connect_timeout, std::chrono::seconds(35));
  EXPECT_EQ(set.waiting_note_interval, std::chrono::milliseconds(500));
  EXPECT_EQ(ReadRuntimeSettings({{"INFINI_RUN_WAITING_NOTE_S", ""}}, {}).waiting_note_interval,
            std::chrono::seconds(30));
  EXPECT_EQ(ErrorOf({{"INFINI_CCL_TIMEOUT_S", "5"}, {"INFINI_CCL_STORE_CONNECT_TIMEOUT_S", "36"}}),
            "INFINI_CCL_STORE_CONNECT_TIMEOUT_S='36': expected a whole number of seconds in 1..35 "
            "(INFINI_CCL_TIMEOUT_S + 30 s; raise INFINI_CCL_TIMEOUT_S to wait longer)");
  EXPECT_THAT(ErrorOf({{"INFINI_CCL_STORE_CONNECT_TIMEOUT_S", "0"}}),
              HasSubstr("INFINI_CCL_STORE_CONNECT_TIMEOUT_S='0': expected"));
  EXPECT_THAT(ErrorOf({{"INFINI_CCL_STORE_CONNECT_TIMEOUT_S", "5s"}}),
              HasSubstr("INFINI_CCL_STORE_CONNECT_TIMEOUT_S='5s': expected"));
  for (const char* bad : {"soon", "0", "-1", "1e7", "2s"}) {
    EXPECT_EQ(ErrorOf({{"INFINI_RUN_WAITING_NOTE_S", bad}}),
              "INFINI_RUN_WAITING_NOTE_S='" + std::string(bad) +
                  "': expected seconds between notes of a waiting process, above 0 and below 10^7");
  }
}

TEST(EnvReaderTest, RefusesBadRuntimeSettings) {
  EXPECT_THAT(ErrorOf({{"INFINI_CCL_TIMEOUT_S", "0"}}),
              AllOf(HasSubstr("INFINI_CCL_TIMEOUT_S='0'"), HasSubstr("seconds")));
  EXPECT_THAT(ErrorOf({{"INFINI_CCL_TIMEOUT_S", "5s"}}), HasSubstr("INFINI_CCL_TIMEOUT_S='5s'"));
  EXPECT_THAT(ErrorOf({{"INFINI_CCL_DEBUG", "verbose"}}),
              AllOf(HasSubstr("INFINI_CCL_DEBUG='verbose'"), HasSubstr("DETAIL")));
  EXPECT_THAT(ErrorOf({{"INFINI_CCL_ALLOW_DEVICE_SHARING", "maybe"}}),
              HasSubstr("INFINI_CCL_ALLOW_DEVICE_SHARING='maybe'"));
  EXPECT_THAT(ErrorOf({{"TORCHELASTIC_RESTART_COUNT", "-1"}}),
              HasSubstr("TORCHELASTIC_RESTART_COUNT='-1'"));
}

// A value holding a newline is echoed escaped, so the error stays one line
// that names the variable and shows the value as "\n".
TEST(EnvReaderTest, ValuesWithANewlineAreEchoedEscapedOnOneLine) {
  struct Case {
    Environment environment;
    std::string named;  // the variable and its escaped value
  };
  const auto torchrun_with = [](const std::string& name, const std::string& value) {
    Environment environment = Torchrun();
    environment[name] = value;
    return environment;
  };
  Environment half_store = Torchrun();
  half_store["INFINI_STORE_ADDR"] = "10.0.0.1\nx";
  Environment ours = Ours();
  ours["NPROC_PER_NODE"] = "4\n";
  const std::vector<Case> cases = {
      {torchrun_with("LOCAL_RANK", "2\nx"), "LOCAL_RANK='2\\nx'"},
      {torchrun_with("RANK", "6\r\n"), "RANK='6\\r\\n'"},
      {torchrun_with("MASTER_PORT", "29500\nx"), "MASTER_PORT='29500\\nx'"},
      {torchrun_with("INFINI_CCL_ALLOW_DEVICE_SHARING", "1\nx"),
       "INFINI_CCL_ALLOW_DEVICE_SHARING='1\\nx'"},
      {torchrun_with("INFINI_CCL_DEVICES_ISOLATED", "\x1b[2J"),
       "INFINI_CCL_DEVICES_ISOLATED='\\x1b[2J'"},
      {torchrun_with("INFINI_CCL_DEBUG", "info\nx"), "INFINI_CCL_DEBUG='info\\nx'"},
      {torchrun_with("INFINI_CCL_TIMEOUT_S", "5\nx"), "INFINI_CCL_TIMEOUT_S='5\\nx'"},
      {half_store, "INFINI_STORE_ADDR='10.0.0.1\\nx'"},
      {ours, "NPROC_PER_NODE='4\\n'"},
  };
  for (const Case& bad : cases) {
    const std::string error = ErrorOf(bad.environment);
    EXPECT_EQ(error.find_first_of("\r\n\x1b"), std::string::npos) << error;
    EXPECT_THAT(error, HasSubstr(bad.named)) << error;
  }
}

}  // namespace
}  // namespace infini::parallel
