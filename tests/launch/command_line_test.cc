// infini_run's parser (launch/src/command_line.cc) alone: argv in,
// LaunchOptions or one UsageError out, with no process started and nothing
// read from the environment (ResolveLaunchOptions does that).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "infini/launch/options.h"

namespace {

using infini::launch::LaunchOptions;
using infini::launch::ParseLaunchCommandLine;
using infini::launch::UsageError;
using ::testing::HasSubstr;
using ::testing::Not;

LaunchOptions Parse(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "infini_run");
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  LaunchOptions options;
  EXPECT_TRUE(ParseLaunchCommandLine(static_cast<int>(arguments.size()), argv.data(), &options));
  return options;
}

std::string Refusal(const std::vector<std::string>& arguments) {
  try {
    Parse(arguments);
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(accepted)";
}

TEST(LaunchCommandLine, ParsesTorchrunsSpellingsIntoOptions) {
  const LaunchOptions options =
      Parse({"--nnodes=2", "--nproc-per-node", "4", "--node_rank=1", "--rdzv_endpoint=h:1234",
             "--rdzv_id=job", "-r", "0:3", "--noisolate_devices", "--", "prog", "--x"});
  EXPECT_EQ(options.nnodes, 2);
  EXPECT_EQ(options.processes_per_node, 4);
  EXPECT_EQ(options.node_rank, 1);
  EXPECT_EQ(options.rendezvous_host, "h");
  EXPECT_EQ(options.rendezvous_port, 1234);
  EXPECT_EQ(options.run_id, "job");
  EXPECT_EQ(options.redirects.CodeFor(0), 3);
  EXPECT_FALSE(options.isolate_devices);
  EXPECT_EQ(options.program_argv, (std::vector<std::string>{"prog", "--x"}));
}

// What needs the machine is left for ResolveLaunchOptions.
TEST(LaunchCommandLine, LeavesWhatNeedsTheMachineUnresolved) {
  setenv("INFINI_CCL_BACKEND", "from_environment", 1);
  setenv("INFINI_RUN_TOKEN", "secret", 1);
  const LaunchOptions options =
      Parse({"--nproc_per_node=gpu", "--rdzv_conf=token_file=/no/such/file", "prog"});
  unsetenv("INFINI_CCL_BACKEND");
  unsetenv("INFINI_RUN_TOKEN");
  EXPECT_EQ(options.processes_per_node, 0);  // counted by ccl_info later
  EXPECT_EQ(options.processes_per_node_spec, "gpu");
  EXPECT_EQ(options.ccl_backend, "");
  EXPECT_EQ(options.run_token, "");
  EXPECT_EQ(options.run_token_file, "/no/such/file");
  EXPECT_EQ(options.run_id, "");
  EXPECT_EQ(options.program_path, "");  // not looked up in PATH
  EXPECT_EQ(options.program_argv, (std::vector<std::string>{"prog"}));
}

TEST(LaunchCommandLine, TorchrunsStaticFormNamesTheRunAfterTheEndpoint) {
  const LaunchOptions options =
      Parse({"--nnodes=2", "--master_addr=10.0.0.1", "--master_port=29500", "prog"});
  EXPECT_EQ(options.run_id, "static-10.0.0.1-29500");
}

// torchrun's --nnodes=MIN:MAX: elastic when MIN < MAX, today's fixed run
// when MIN == MAX; last_call_timeout and join_timeout bound each round.
TEST(LaunchCommandLine, NnodesMinMaxMakesAnElasticRun) {
  const LaunchOptions elastic = Parse({"--nnodes=2:4", "--rdzv_endpoint=h:1", "--rdzv_id=job",
                                       "--rdzv_conf=last_call_timeout=1.5,join_timeout=7", "prog"});
  EXPECT_TRUE(elastic.elastic());
  EXPECT_EQ(elastic.min_nnodes, 2);
  EXPECT_EQ(elastic.nnodes, 4);
  EXPECT_EQ(elastic.NnodesText(), "2:4");
  EXPECT_EQ(elastic.last_call_timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(elastic.rendezvous_timeout, std::chrono::seconds(7));
  const LaunchOptions fixed =
      Parse({"--nnodes=3:3", "--rdzv_endpoint=h:1", "--rdzv_id=job", "prog"});
  EXPECT_FALSE(fixed.elastic());
  EXPECT_EQ(fixed.nnodes, 3);
  EXPECT_EQ(fixed.NnodesText(), "3");
  EXPECT_EQ(fixed.last_call_timeout, std::chrono::seconds(30)) << "torchrun's default";
  EXPECT_EQ(Refusal({"--nnodes=3:2", "--rdzv_endpoint=h:1", "--rdzv_id=job", "prog"}),
            "--nnodes='3:2': expected MIN:MAX with MIN <= MAX");
  EXPECT_EQ(Refusal({"--nnodes=0:2", "prog"}),
            "--nnodes='0:2': expected MIN:MAX, each a number of nodes in 1..1048576");
  // torchrun accepts --node_rank on an elastic run and ignores it: one note.
  const LaunchOptions ranked =
      Parse({"--nnodes=1:4", "--node_rank=1", "--rdzv_endpoint=h:1", "--rdzv_id=job", "prog"});
  EXPECT_EQ(ranked.node_rank, -1);
  EXPECT_EQ(ranked.notes, (std::vector<std::string>{
                              "--node_rank=1 is ignored with --nnodes=1:4: each round numbers "
                              "the nodes (as torchrun)"}));
}

// argparse reads torchrun's -r3 and -t3 as -r 3 and -t 3.
TEST(LaunchCommandLine, AttachedShortOptionsAreTorchrunsSpelling) {
  const LaunchOptions options = Parse({"-r3", "-t2", "--nproc_per_node=2", "prog"});
  EXPECT_EQ(options.redirects.CodeFor(1), 3);
  EXPECT_EQ(options.tee.CodeFor(0), 2);
  EXPECT_EQ(Parse({"-r=1", "prog"}).redirects.CodeFor(0), 1);
  EXPECT_EQ(Parse({"-r0:3", "--nproc_per_node=2", "prog"}).redirects.CodeFor(0), 3);
  EXPECT_TRUE(Parse({"-run_path", "prog"}).python_run_path) << "a long name is not -r";
  EXPECT_THAT(Refusal({"-rdvz_id=x", "prog"}), HasSubstr("did you mean --rdzv_id?"));
  EXPECT_EQ(Refusal({"-r9", "prog"}),
            "--redirects='9': expected 0 (none), 1 (stdout), 2 (stderr), 3 (both), or "
            "LOCAL_RANK:CODE,... (e.g. 0:3,1:2)");
}

TEST(LaunchCommandLine, AMistypedFlagGetsTheNearestName) {
  EXPECT_EQ(Refusal({"--nproc_per_nod=2", "prog"}),
            "unknown flag '--nproc_per_nod' (see infini_run --help); did you mean "
            "--nproc_per_node?; the program's own flags go after the program, or after --");
  EXPECT_THAT(Refusal({"--nproc-per-mode=2", "prog"}), HasSubstr("did you mean --nproc_per_node?"));
  EXPECT_THAT(Refusal({"--rdzv_endpiont=h:1", "prog"}), HasSubstr("did you mean --rdzv_endpoint?"));
  EXPECT_THAT(Refusal({"--max_restart=2", "prog"}), HasSubstr("did you mean --max_restarts?"));
  EXPECT_THAT(Refusal({"--zzzzzz", "prog"}), Not(HasSubstr("did you mean")));
}

// torchrun reads PET_<FLAG> as each flag's default; Kubeflow's PyTorchJob and
// TrainJob hand it its arguments so. A flag on the command line wins.
TEST(LaunchCommandLine, PetVariablesAreEveryFlagsDefault) {
  std::vector<std::string> environment_entries = {
      "PET_NNODES=2",          "PET_NPROC_PER_NODE=4",
      "PET_NODE_RANK=1",       "PET_MASTER_ADDR=10.1.2.3",
      "PET_MASTER_PORT=23456", "PET_RDZV_CONF=heartbeat_timeout=7",
      "PET_STANDALONE=0",      "PATH=/bin"};
  std::vector<char*> environment;
  for (std::string& entry : environment_entries) environment.push_back(entry.data());
  environment.push_back(nullptr);
  auto parse = [&](std::vector<std::string> arguments) {
    arguments.insert(arguments.begin(), "infini_run");
    std::vector<char*> argv;
    for (std::string& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    LaunchOptions options;
    ParseLaunchCommandLine(static_cast<int>(arguments.size()), argv.data(), &options,
                           environment.data());
    return options;
  };
  const LaunchOptions options = parse({"prog"});
  EXPECT_EQ(options.nnodes, 2);
  EXPECT_EQ(options.processes_per_node, 4);
  EXPECT_EQ(options.node_rank, 1);
  EXPECT_EQ(options.rendezvous_host, "10.1.2.3");
  EXPECT_EQ(options.rendezvous_port, 23456);
  EXPECT_EQ(options.run_id, "static-10.1.2.3-23456");
  EXPECT_EQ(options.heartbeat_timeout, std::chrono::seconds(7));
  EXPECT_EQ(parse({"--nproc_per_node=2", "prog"}).processes_per_node, 2);
  environment_entries[1] = "PET_NPROC_PER_NODE=many";
  environment[1] = environment_entries[1].data();
  try {
    parse({"prog"});
    ADD_FAILURE() << "PET_NPROC_PER_NODE=many accepted";
  } catch (const UsageError& error) {
    EXPECT_EQ(std::string(error.what()),
              "--nproc_per_node='many': expected a number in 1..65536, or auto, gpu or cpu "
              "(--nproc_per_node came from PET_NPROC_PER_NODE)");
  }
  // Without an environment (the fuzzer's case) nothing is read.
  EXPECT_EQ(Parse({"prog"}).nnodes, 1);
}

TEST(LaunchCommandLine, EachBadValueIsOneRefusalNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--no_such_flag=1", "prog"},
       "unknown flag '--no_such_flag' (see infini_run --help); the program's own flags go after "
       "the program, or after --"},
      {{"--nproc_per_node=x", "prog"},
       "--nproc_per_node='x': expected a number in 1..65536, or auto, gpu or cpu"},
      {{"--dry_run=maybe", "prog"}, "--dry_run='maybe': expected true or false"},
      {{"--nnodes"}, "--nnodes needs a value (see infini_run --help)"},
      {{"--nproc_per_node=2", "--tee=5:1", "prog"},
       "--tee names local rank 5, expected ranks below --nproc_per_node=2"},
      {{"--nproc_per_node=2", "--local_ranks_filter=2", "prog"},
       "--local_ranks_filter='2': expected comma-separated local ranks below --nproc_per_node=2"},
      {{"--module", "--no_python", "prog"}, "--module and --no_python exclude each other"},
      {{"--ccl_backend=a b", "prog"},
       "--ccl_backend='a b': expected a backend name (nccl, gloo, auto) or a plugin path"},
      {{}, "no program given: expected infini_run [FLAGS] [--] PROGRAM [ARGS...] (see --help)"},
  };
  for (const auto& [arguments, refusal] : cases) {
    EXPECT_EQ(Refusal(arguments), refusal);
  }
}

// --dump_stacks takes its value only after '=', so a bare one never eats
// the next flag; it needs no program.
TEST(LaunchCommandLine, DumpStacksTakesAnOptionalRunIdAndNoProgram) {
  const LaunchOptions bare = Parse({"--dump_stacks", "--nproc_per_node=2"});
  EXPECT_TRUE(bare.dump_stacks);
  EXPECT_EQ(bare.dump_stacks_run_id, "");
  const LaunchOptions named = Parse({"--dump-stacks=job42"});
  EXPECT_TRUE(named.dump_stacks);
  EXPECT_EQ(named.dump_stacks_run_id, "job42");
  EXPECT_FALSE(Parse({"prog"}).dump_stacks);
}

// A default is written once (options.h): the flag table shows it, and a
// command line without the flag parses to it.
TEST(LaunchCommandLine, EachDefaultIsWrittenOnceAndParsesToItself) {
  const LaunchOptions defaults;
  const LaunchOptions parsed = Parse({"prog"});
  EXPECT_EQ(parsed.nnodes, defaults.nnodes);
  EXPECT_EQ(parsed.processes_per_node, defaults.processes_per_node);
  EXPECT_EQ(parsed.processes_per_node_spec, defaults.processes_per_node_spec);
  EXPECT_EQ(parsed.rendezvous_timeout, defaults.rendezvous_timeout);
  EXPECT_EQ(parsed.max_restarts, defaults.max_restarts);
  EXPECT_EQ(parsed.min_ranks, defaults.min_ranks);
  EXPECT_EQ(parsed.monitor_interval, defaults.monitor_interval);
  EXPECT_EQ(parsed.term_timeout, defaults.term_timeout);
  EXPECT_EQ(parsed.role, defaults.role);
  EXPECT_EQ(parsed.redirects.default_code, defaults.redirects.default_code);
  EXPECT_EQ(parsed.tee.default_code, defaults.tee.default_code);
  const std::string usage = infini::launch::LaunchUsage();
  EXPECT_THAT(usage, HasSubstr("\n  --rdzv_timeout=VALUE (default: \"300\")\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --monitor_interval=VALUE (default: \"0.1\")\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --redirects=VALUE (default: \"0\") or -r\n"));
}

TEST(LaunchCommandLine, HelpIsAskedForAndTheUsageListsEveryFlag) {
  std::vector<std::string> arguments = {"infini_run", "--nproc_per_node=2", "--help"};
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  LaunchOptions options;
  EXPECT_FALSE(ParseLaunchCommandLine(static_cast<int>(argv.size()), argv.data(), &options));
  const std::string usage = infini::launch::LaunchUsage();
  EXPECT_THAT(usage,
              ::testing::StartsWith("usage: infini_run [FLAGS] [--] PROGRAM [PROGRAM_ARGS...]\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --nproc_per_node=VALUE (default: \"1\")\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --dry_run[=BOOL] (default: false)\n"));
}

}  // namespace

// Several nodes relay the store for their ranks unless relay=0 says not to.
TEST(LaunchCommandLine, RdzvConfRelayTurnsTheNodesRelayOnAndOff) {
  auto with = [](std::vector<std::string> extra) {
    std::vector<std::string> arguments = {"--nnodes=2", "--rdzv_endpoint=h:1", "--rdzv_id=job"};
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    arguments.push_back("prog");
    return arguments;
  };
  EXPECT_TRUE(Parse(with({})).relay_store);
  EXPECT_FALSE(Parse(with({"--rdzv_conf=relay=0"})).relay_store);
  EXPECT_TRUE(Parse(with({"--rdzv_conf=relay=1"})).relay_store);
  EXPECT_EQ(Refusal(with({"--rdzv_conf=relay=yes"})),
            "--rdzv_conf='relay=yes': expected relay=0 or relay=1");
  EXPECT_EQ(Parse(with({"--rdzv_conf=relay_log=/tmp/r.log"})).relay_log_path, "/tmp/r.log");
  EXPECT_EQ(Refusal(with({"--rdzv_conf=relay_log="})), "--rdzv_conf='relay_log=': expected a path");
}
