// The one command-line parser (infini/common/command_line.h) over a small
// table of its own: every spelling a program gets from it, its refusals, and
// --help made of the table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "infini/common/command_line.h"

namespace infini::cli {
namespace {

using ::testing::HasSubstr;

Flag Make(const std::string& name, FlagType type, const std::string& default_value) {
  Flag flag;
  flag.name = name;
  flag.type = type;
  flag.default_value = default_value;
  return flag;
}

CommandLine Table(std::vector<std::string>* applied = nullptr) {
  std::vector<Flag> flags;
  Flag count = Make("count", FlagType::kInteger, "4");
  count.help = "how many";
  count.letter = 'n';
  count.min = 1;
  count.max = 100;
  count.environment = "TEST_COUNT";
  if (applied != nullptr) count.on_set = [applied](const std::string& v) { applied->push_back(v); };
  flags.push_back(count);
  Flag name = Make("run_name", FlagType::kText, "x");
  name.help = "a name";
  name.letter = 'r';
  flags.push_back(name);
  Flag verbose = Make("verbose", FlagType::kSwitch, "false");
  verbose.help = "say more";
  verbose.letter = 'v';
  verbose.environment = "TEST_VERBOSE";
  flags.push_back(verbose);
  Flag ratio = Make("ratio", FlagType::kNumber, "0.5");
  ratio.help = "a share";
  ratio.min = 0;
  ratio.max = 1;
  flags.push_back(ratio);
  Flag stacks = Make("dump", FlagType::kText, "");
  stacks.help = "optional value";
  stacks.value_optional = true;
  flags.push_back(stacks);
  Program program;
  program.name = "prog";
  program.usage_line = "prog [FLAGS] [--] WORDS...";
  program.positional = Program::Positional::kAnywhere;
  return CommandLine(program, flags);
}

std::string Refusal(const std::vector<std::string>& arguments, char* const* environment = nullptr) {
  CommandLine line = Table();
  try {
    line.Parse(arguments, environment);
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(accepted)";
}

TEST(CliParser, EverySpellingOfAValue) {
  for (const std::vector<std::string>& arguments : std::vector<std::vector<std::string>>{
           {"--count=7"}, {"--count", "7"}, {"-count=7"}, {"-n7"}, {"-n", "7"}, {"-n=7"}}) {
    CommandLine line = Table();
    ASSERT_TRUE(line.Parse(arguments)) << arguments[0];
    EXPECT_EQ(line.Integer("count"), 7) << arguments[0];
    EXPECT_TRUE(line.Given("count"));
  }
  CommandLine line = Table();
  ASSERT_TRUE(line.Parse({"--run-name=a", "--run_name", "b"}));
  EXPECT_EQ(line["run_name"], "b") << "dashes or underscores; the last one wins";
}

TEST(CliParser, SwitchesAndTheirNegation) {
  for (const auto& [arguments, expected] :
       std::vector<std::pair<std::vector<std::string>, bool>>{{{"--verbose"}, true},
                                                              {{"-v"}, true},
                                                              {{"--noverbose"}, false},
                                                              {{"--verbose=false"}, false},
                                                              {{"--verbose=1"}, true},
                                                              {{}, false}}) {
    CommandLine line = Table();
    ASSERT_TRUE(line.Parse(arguments));
    EXPECT_EQ(line.Switch("verbose"), expected);
  }
  EXPECT_EQ(Refusal({"--verbose=maybe"}), "--verbose='maybe': expected true or false");
}

TEST(CliParser, DoubleDashEndsTheFlagsAndWordsStayInOrder) {
  CommandLine line = Table();
  ASSERT_TRUE(line.Parse({"a", "--count=2", "b", "--", "--count=3", "-v"}));
  EXPECT_EQ(line.Integer("count"), 2);
  EXPECT_FALSE(line.Switch("verbose"));
  EXPECT_EQ(line.positional(), (std::vector<std::string>{"a", "b", "--count=3", "-v"}));
}

TEST(CliParser, EachRefusalIsOneLineNamingFlagValueAndWhatWasExpected) {
  EXPECT_EQ(Refusal({"--count=0"}), "--count='0': expected an integer from 1 to 100");
  EXPECT_EQ(Refusal({"-n", "x"}), "-n --count='x': expected an integer from 1 to 100");
  EXPECT_EQ(Refusal({"--ratio=2"}), "--ratio='2': expected a number from 0 to 1");
  EXPECT_EQ(Refusal({"--count"}), "--count needs a value (see prog --help)");
  EXPECT_EQ(Refusal({"-n"}), "-n needs a value (see prog --help)");
  EXPECT_EQ(Refusal({"--cuont=2"}),
            "unknown flag '--cuont' (see prog --help); did you mean --count?");
  EXPECT_EQ(Refusal({"--zzzzzz"}), "unknown flag '--zzzzzz' (see prog --help)");
  EXPECT_EQ(Refusal({"-q7"}), "unknown flag '-q' (see prog --help)");
  EXPECT_THAT(Refusal({"-rnu_name=a"}), HasSubstr("did you mean --run_name?"))
      << "a mistyped long name is not -r nu_name=a";
  EXPECT_EQ(Refusal({"-vx"}), "unknown flag '-vx' (see prog --help)") << "a switch takes no word";
}

TEST(CliParser, AVariableIsTheDefaultAndTheCommandLineWins) {
  std::vector<std::string> entries = {"TEST_COUNT=9", "TEST_VERBOSE=1", "OTHER=2"};
  std::vector<char*> environment;
  for (std::string& entry : entries) environment.push_back(entry.data());
  environment.push_back(nullptr);
  CommandLine line = Table();
  ASSERT_TRUE(line.Parse({}, environment.data()));
  EXPECT_EQ(line.Integer("count"), 9);
  EXPECT_TRUE(line.Switch("verbose"));
  EXPECT_EQ(line.VariableOf("count"), "TEST_COUNT");
  EXPECT_FALSE(line.Given("count"));
  EXPECT_EQ(line.NameSources("--count is wrong"),
            "--count is wrong (--count came from TEST_COUNT)");
  ASSERT_TRUE(line.Parse({"-n3"}, environment.data()));
  EXPECT_EQ(line.Integer("count"), 3);
  EXPECT_EQ(line.VariableOf("count"), "");
  entries[0] = "TEST_COUNT=many";
  environment[0] = entries[0].data();
  EXPECT_EQ(Refusal({}, environment.data()),
            "TEST_COUNT='many': expected an integer from 1 to 100 (the default of --count)");
}

TEST(CliParser, ChecksRunInCommandLineOrderAndAnOptionalValueNeedsItsEquals) {
  std::vector<std::string> applied;
  CommandLine line = Table(&applied);
  ASSERT_TRUE(line.Parse({"-n2", "--dump", "word", "--count=5", "--dump=id"}));
  EXPECT_EQ(applied, (std::vector<std::string>{"2", "5"}));
  EXPECT_EQ(line["dump"], "id");
  EXPECT_EQ(line.positional(), (std::vector<std::string>{"word"}));
}

TEST(CliParser, HelpIsMadeOfTheTable) {
  CommandLine line = Table();
  EXPECT_FALSE(line.Parse({"--count=2", "--help"}));
  EXPECT_FALSE(line.Parse({"-h"}));
  const std::string usage = line.Usage();
  EXPECT_THAT(usage, ::testing::StartsWith("usage: prog [FLAGS] [--] WORDS...\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --count=VALUE (default: 4) or -n\n      how many\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --run_name=VALUE (default: \"x\") or -r\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --verbose[=BOOL] (default: false) or -v\n"));
}

}  // namespace
}  // namespace infini::cli
