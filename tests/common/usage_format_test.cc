// infini/common/usage.h's format and infini::flags::Parse (infini/common/
// flags.h), in process: what --help lists, and the one-line refusals.
#include <gflags/gflags.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "infini/common/flags.h"
#include "infini/common/usage.h"

DEFINE_int32(usage_test_count, 3, "How many things to count. Example: --usage_test_count=5");
DEFINE_bool(usage_test_switch, false, "A switch");
DEFINE_string(usage_test_name, "x", "A name");

namespace {

using ::testing::ExitedWithCode;
using ::testing::HasSubstr;
using ::testing::Not;

// Parse over a copy of `arguments` (argv[0] is "usage_test").
std::vector<std::string> ParseArguments(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "usage_test");
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(arguments.size());
  char** pointer = argv.data();
  infini::flags::Parse(&argc, &pointer, "usage_test [--usage_test_count=N]");
  return std::vector<std::string>(pointer + 1, pointer + argc);
}

TEST(UsageFormat, ListsEachFlagWithItsValueDefaultAndWrappedHelp) {
  const std::string text = infini::flags::FormatUsage(
      "prog [--n=N]", "Does a thing.",
      {{"n", "INT", "3", std::string(100, 'a') + " " + std::string(10, 'b')},
       {"quiet", "", "false", "Say less"}},
      "See docs/x.md.");
  EXPECT_EQ(text, "usage: prog [--n=N]\n\nDoes a thing.\n\nflags:\n  --n=INT (default: 3)\n      " +
                      std::string(100, 'a') + "\n      " + std::string(10, 'b') +
                      "\n  --quiet[=BOOL] (default: false)\n      Say less\n\nSee docs/x.md.\n");
}

TEST(UsageFormat, RefusalsAreOneLineWithTheValueEscaped) {
  EXPECT_EQ(infini::flags::UnknownFlagMessage("prog", "--bad\nflag"),
            "unknown flag '--bad\\nflag' (see prog --help)");
  EXPECT_EQ(infini::flags::BadValueMessage("n", "1\n2", "an integer"),
            "--n='1\\n2': expected an integer");
  EXPECT_EQ(infini::flags::MissingValueMessage("prog", "n"), "--n needs a value (see prog --help)");
}

TEST(FlagsParse, SetsFlagsInEverySpellingAndKeepsTheOtherArguments) {
  gflags::FlagSaver saved;
  EXPECT_EQ(ParseArguments({"a", "--usage_test_count=7", "-usage_test_switch", "--usage_test_name",
                            "y", "b", "--", "--usage_test_count=9"}),
            (std::vector<std::string>{"a", "b", "--usage_test_count=9"}));
  EXPECT_EQ(FLAGS_usage_test_count, 7);
  EXPECT_TRUE(FLAGS_usage_test_switch);
  EXPECT_EQ(FLAGS_usage_test_name, "y");
  ParseArguments({"--nousage_test_switch"});
  EXPECT_FALSE(FLAGS_usage_test_switch);
}

TEST(FlagsParse, OwnFlagsAreThisProgramsNotGflags) {
  std::vector<std::string> names;
  for (const infini::flags::FlagHelp& flag : infini::flags::OwnFlags()) names.push_back(flag.name);
  EXPECT_THAT(names, ::testing::Contains("usage_test_count"));
  EXPECT_THAT(names, Not(::testing::Contains("flagfile")));
  EXPECT_THAT(names, Not(::testing::Contains("helpfull")));
}

TEST(FlagsParseDeathTest, HelpPrintsTheUsageAndExitsZero) {
  EXPECT_EXIT(ParseArguments({"--help"}), ExitedWithCode(0), "");
}

TEST(FlagsParseDeathTest, AnUnknownFlagIsOneLineAndExitTwo) {
  EXPECT_EXIT(ParseArguments({"--no_such_flag=1"}), ExitedWithCode(2),
              "^usage_test: unknown flag '--no_such_flag' \\(see usage_test --help\\)\n$");
}

TEST(FlagsParseDeathTest, ABadValueNamesTheFlagTheValueAndTheType) {
  EXPECT_EXIT(ParseArguments({"--usage_test_count=many"}), ExitedWithCode(2),
              "^usage_test: --usage_test_count='many': expected a 32-bit integer\n$");
  EXPECT_EXIT(ParseArguments({"--usage_test_switch=perhaps"}), ExitedWithCode(2),
              "^usage_test: --usage_test_switch='perhaps': expected true or false\n$");
  EXPECT_EXIT(ParseArguments({"--usage_test_name"}), ExitedWithCode(2),
              "^usage_test: --usage_test_name needs a value \\(see usage_test --help\\)\n$");
}

}  // namespace
