#include "bench_options.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace infini::bench {
namespace {

bool Parse(std::vector<std::string> words, BenchOptions* options) {
  words.insert(words.begin(), "ccl_bench");
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  return ParseBenchCommandLine(static_cast<int>(words.size()), argv.data(), options);
}

TEST(BenchOptions, ByteCountsTakeBinarySuffixes) {
  EXPECT_EQ(ParseByteCount("max_bytes", "8"), 8);
  EXPECT_EQ(ParseByteCount("max_bytes", "64K"), 64 << 10);
  EXPECT_EQ(ParseByteCount("max_bytes", "16M"), 16 << 20);
  EXPECT_EQ(ParseByteCount("max_bytes", "1G"), int64_t{1} << 30);
}

TEST(BenchOptions, BadByteCountNamesTheFlagAndTheValue) {
  try {
    ParseByteCount("max_bytes", "12Q");
    FAIL() << "12Q was accepted";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("--max_bytes='12Q'"), std::string::npos)
        << error.what();
  }
  EXPECT_THROW(ParseByteCount("min_bytes", "0"), UsageError);
  EXPECT_THROW(ParseByteCount("min_bytes", "K"), UsageError);
}

TEST(BenchOptions, DefaultSweepIsEightBytesToOneGibibyteByFour) {
  const std::vector<int64_t> sizes = MessageSizes(8, int64_t{1} << 30, 4);
  ASSERT_EQ(sizes.size(), 15u);
  EXPECT_EQ(sizes.front(), 8);
  EXPECT_EQ(sizes[1], 32);
  EXPECT_EQ(sizes[13], int64_t{1} << 29);     // 8·4^13; 8·4^14 = 2 GiB is past the end
  EXPECT_EQ(sizes.back(), int64_t{1} << 30);  // the largest size asked for is measured
}

TEST(BenchOptions, FlagsSetTheirFieldsInBothSpellings) {
  BenchOptions options;
  ASSERT_TRUE(Parse({"--collectives=all_gather,sendrecv", "--dtype", "bfloat16", "--op=max",
                     "--inplace", "--check=false", "--iters=7", "--warmup", "2",
                     "--threads_per_process=4", "--min_bytes=1K", "--max_bytes=4M"},
                    &options));
  EXPECT_EQ(options.collectives,
            (std::vector<Collective>{Collective::kAllGather, Collective::kSend}));
  EXPECT_EQ(ccl::DataTypeName(options.dtype), "bfloat16");
  EXPECT_EQ(options.op, ccl::ReduceOp::kMax);
  EXPECT_TRUE(options.in_place);
  EXPECT_FALSE(options.check);
  EXPECT_EQ(options.iterations, 7);
  EXPECT_EQ(options.warmup_iterations, 2);
  EXPECT_EQ(options.threads_per_process, 4);
  EXPECT_EQ(options.min_bytes, 1024);
  EXPECT_EQ(options.max_bytes, 4 << 20);
}

TEST(BenchOptions, AllSelectsEveryCollective) {
  BenchOptions options;
  ASSERT_TRUE(Parse({"--collectives=all"}, &options));
  EXPECT_EQ(options.collectives.size(), 7u);
}

// ccl_bench's collectives are ccl's (their properties come from ccl's
// table); what the user sees stays: the spellings, the order of 'all', and
// which cases --inplace skips.
TEST(BenchOptions, CollectivesKeepTheirSpellingsOrderAndInPlaceForms) {
  std::vector<std::string> names, without_in_place;
  for (Collective collective : AllCollectives()) {
    names.emplace_back(BenchCollectiveName(collective));
    if (!ccl::HasInPlaceForm(collective)) without_in_place.push_back(names.back());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"all_reduce", "all_gather", "reduce_scatter",
                                             "broadcast", "reduce", "sendrecv", "all_to_all"}));
  EXPECT_EQ(without_in_place, (std::vector<std::string>{"sendrecv", "all_to_all"}));
  BenchOptions options;
  ASSERT_TRUE(Parse({"--collectives=sendrecv"}, &options));
  EXPECT_EQ(options.collectives, (std::vector<Collective>{Collective::kSend}));
  EXPECT_THROW(Parse({"--collectives=send"}, &options), UsageError) << "ccl's name, not bench's";
}

TEST(BenchOptions, UnknownFlagIsRefusedByName) {
  BenchOptions options;
  try {
    Parse({"--iterations=5"}, &options);
    FAIL() << "--iterations was accepted";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("'--iterations'"), std::string::npos);
  }
}

TEST(BenchOptions, BadValuesAreRefused) {
  BenchOptions options;
  EXPECT_THROW(Parse({"--collectives=allreduce"}, &options), UsageError);
  EXPECT_THROW(Parse({"--dtype=float8"}, &options), UsageError);
  EXPECT_THROW(Parse({"--op=xor"}, &options), UsageError);
  EXPECT_THROW(Parse({"--iters=0"}, &options), UsageError);
  EXPECT_THROW(Parse({"--threads_per_process=0"}, &options), UsageError);
  EXPECT_THROW(Parse({"--min_bytes=1M", "--max_bytes=1K"}, &options), UsageError);
  EXPECT_THROW(Parse({"--iters"}, &options), UsageError);
}

// Every count flag has an upper bound, said in its one-line refusal with
// the flag and the value (before, --warmup=4294967296 --iters=2147483648 ran).
TEST(BenchOptions, CountsAboveTheirBoundAreRefusedNamingFlagValueAndRange) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--iters=2147483648", "--iters='2147483648': expected an integer from 1 to 1000000000"},
      {"--warmup=4294967296", "--warmup='4294967296': expected an integer from 0 to 1000000000"},
      {"--iters=1000000001", "--iters='1000000001': expected an integer from 1 to 1000000000"},
      {"--threads_per_process=1025",
       "--threads_per_process='1025': expected an integer from 1 to 1024"},
      {"--step_factor=1025", "--step_factor='1025': expected an integer from 2 to 1024"},
      {"--root=1073741825", "--root='1073741825': expected an integer from 0 to 1073741824"},
      {"--max_bytes=2T", "--max_bytes='2T': expected a byte count from 1 to 1T"},
      {"--iters=99999999999999999999", "--iters='99999999999999999999': expected an integer"},
  };
  for (const auto& [flag, message] : cases) {
    BenchOptions options;
    try {
      Parse({flag}, &options);
      ADD_FAILURE() << flag << " was accepted";
    } catch (const UsageError& error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos)
          << flag << ": " << error.what();
    }
  }
  BenchOptions options;
  ASSERT_TRUE(Parse({"--iters=1000000000", "--warmup=1000000000"}, &options));
  EXPECT_EQ(options.iterations, 1'000'000'000);
  EXPECT_EQ(options.warmup_iterations, 1'000'000'000);
}

TEST(BenchOptions, TimingDefaultsToNcclTestsBackToBack) {
  BenchOptions options;
  ASSERT_TRUE(Parse({}, &options));
  EXPECT_EQ(options.timing, Timing::kBackToBack);
  ASSERT_TRUE(Parse({"--timing=per_iteration"}, &options));
  EXPECT_EQ(options.timing, Timing::kPerIteration);
  EXPECT_THROW(Parse({"--timing=events"}, &options), UsageError);
}

// nccl-tests' command line carried over: each letter means what it means
// there, and parses to the same options as our long flags.
TEST(BenchOptions, NcclTestsFlagsParseToTheSamePlanAsOurLongFlags) {
  BenchOptions ours;
  ASSERT_TRUE(
      Parse({"--min_bytes=8",      "--max_bytes=1G",  "--step_factor=2", "--op=max",
             "--dtype=float16",    "--root=1",        "--iters=7",       "--warmup=3",
             "--agg_iters=2",      "--run_cycles=2",  "--check",         "--timing=per_iteration",
             "--graph_launches=4", "--cpu_time",      "--average=max",   "--register=1",
             "--timeout=9",        "--memory_report", "--json=out.json", "--threads_per_process=2"},
            &ours));
  BenchOptions theirs;
  ASSERT_TRUE(
      Parse({"-b", "8",   "-e", "1G", "-f", "2",  "-o", "max", "-d", "half", "-r",       "1",  "-n",
             "7",  "-w3", "-m", "2",  "-N", "2",  "-c", "1",   "-z", "1",    "-G",       "4",  "-C",
             "1",  "-a",  "3",  "-R", "1",  "-T", "9",  "-M",  "1",  "-J",   "out.json", "-g", "2"},
            &theirs));
  const auto plan = [](const BenchOptions& o) {
    return std::make_tuple(o.min_bytes, o.max_bytes, o.step_factor, o.step_bytes, o.op,
                           ccl::DataTypeName(o.dtype), o.root, o.iterations, o.warmup_iterations,
                           o.aggregated_launches, o.run_cycles, o.check, o.timing, o.graph_launches,
                           o.cpu_time, o.average, o.register_buffers, o.timeout_s, o.memory_report,
                           o.json_path, o.threads_per_process);
  };
  EXPECT_EQ(plan(ours), plan(theirs));
  EXPECT_EQ(SweepSizes(ours), SweepSizes(theirs));
  EXPECT_EQ(SweepSizes(theirs).size(), 28u);  // 8 B ×2 to 1 GiB
}

TEST(BenchOptions, NcclTestsSpellingsOfTypesSwitchesAndAverages) {
  const std::vector<std::pair<std::string, std::string>> types = {
      {"float", "float32"}, {"half", "float16"}, {"double", "float64"},
      {"int", "int32"},     {"char", "int8"},    {"bfloat16", "bfloat16"}};
  for (const auto& [theirs, ours] : types) {
    BenchOptions options;
    ASSERT_TRUE(Parse({"-d", theirs}, &options)) << theirs;
    EXPECT_EQ(ccl::DataTypeName(options.dtype), ours) << theirs;
  }
  BenchOptions options;
  ASSERT_TRUE(Parse({"-c", "0", "-z", "0", "-a", "0"}, &options));
  EXPECT_FALSE(options.check);
  EXPECT_EQ(options.timing, Timing::kBackToBack);
  EXPECT_EQ(options.average, RankAverage::kRank0);
  ASSERT_TRUE(Parse({"-a", "2"}, &options));
  EXPECT_EQ(options.average, RankAverage::kMin);
  // -i: sizes grow by bytes (nccl-tests' stepbytes); the last of -i/-f wins.
  ASSERT_TRUE(Parse({"-b", "1K", "-e", "4K", "-i", "1K"}, &options));
  EXPECT_EQ(SweepSizes(options), (std::vector<int64_t>{1024, 2048, 3072, 4096}));
  ASSERT_TRUE(Parse({"-i", "1K", "-f", "2"}, &options));
  EXPECT_EQ(SweepSizes(options), (std::vector<int64_t>{1024, 2048, 4096}));
}

TEST(BenchOptions, UnknownOrBadNcclTestsFlagIsOneLineNamingIt) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-q", "1"}, "unknown flag '-q'"},
      {{"-x7"}, "unknown flag '-x'"},
      {{"-b", "12Q"}, "-b --min_bytes='12Q': expected a byte count"},
      {{"-z", "2"}, "-z '2': expected 0 (launches back to back) or 1"},
      {{"-a", "4"}, "-a '4': expected 0 (rank 0), 1 (mean), 2 (min) or 3 (max)"},
      {{"-R", "3"}, "-R --register='3': expected an integer from 0 to 2"},
      {{"-n"}, "-n needs a value"},
      {{"-d", "all"}, "-d --dtype='all'"},
  };
  for (const auto& [words, message] : cases) {
    BenchOptions options;
    try {
      Parse(words, &options);
      ADD_FAILURE() << words[0] << " was accepted";
    } catch (const UsageError& error) {
      const std::string what = error.what();
      EXPECT_NE(what.find(message), std::string::npos) << words[0] << ": " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace infini::bench

namespace infini::bench {
namespace {

TEST(SplitRule, NcclTestsSpellingsGiveTheColourOfEachRank) {
  const std::vector<std::pair<std::string, std::vector<int>>> cases = {
      {"MOD 2", {0, 1, 0, 1, 0, 1}},   {"%3", {0, 1, 2, 0, 1, 2}},
      {"and 0x1", {0, 1, 0, 1, 0, 1}}, {"&0b10", {0, 0, 2, 2, 0, 0}},
      {"DIV 4", {0, 0, 0, 0, 1, 1}},   {"/2", {0, 0, 1, 1, 2, 2}},
      {"OR 0x4", {4, 5, 6, 7, 4, 5}},  {"|1", {1, 1, 3, 3, 5, 5}}};
  for (const auto& [text, colors] : cases) {
    const SplitRule rule = ParseSplitRule("split", text);
    std::vector<int> got;
    for (int rank = 0; rank < 6; ++rank) got.push_back(rule.Color(rank));
    EXPECT_EQ(got, colors) << text;
  }
  for (const char* bad : {"MOD 0", "XOR 1", "MOD", "MOD two", "2", "DIV -1"}) {
    EXPECT_THROW(ParseSplitRule("split", bad), UsageError) << bad;
  }
  try {
    ParseSplitRule("split", "XOR 1");
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("--split='XOR 1': expected an operation"),
              std::string::npos)
        << error.what();
  }
}

TEST(SplitRule, TheFlagWinsThenTheMaskThenTheRuleVariable) {
  std::map<std::string, std::string> environment = {{"NCCL_TESTS_SPLIT", "DIV 2"},
                                                    {"NCCL_TESTS_SPLIT_MASK", "0x6"}};
  const auto getenv = [&](const char* name) -> const char* {
    const auto found = environment.find(name);
    return found == environment.end() ? nullptr : found->second.c_str();
  };
  BenchOptions options;
  ApplySplitEnvironment(getenv, &options);
  EXPECT_EQ(options.split.Color(7), 6) << "NCCL_TESTS_SPLIT_MASK: rank & 0x6";
  environment.erase("NCCL_TESTS_SPLIT_MASK");
  options = BenchOptions();
  ApplySplitEnvironment(getenv, &options);
  EXPECT_EQ(options.split.Color(7), 3) << "NCCL_TESTS_SPLIT: DIV 2";
  ASSERT_TRUE(Parse({"--split=MOD 2"}, &options));
  ApplySplitEnvironment(getenv, &options);
  EXPECT_EQ(options.split.Color(7), 1) << "--split wins";
  environment["NCCL_TESTS_SPLIT"] = "XOR 2";
  options = BenchOptions();
  EXPECT_THROW(ApplySplitEnvironment(getenv, &options), UsageError);
}

}  // namespace
}  // namespace infini::bench
