// Runs bin/dataloader_plan and bin/make_token_bin as a user would.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "infini/data/token_file.h"
#include "test_files.h"

namespace infini::data {
namespace {

using testing::TemporaryDirectory;

struct ProgramResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadText(const std::string& path) {
  std::ifstream stream(path);
  std::stringstream text;
  text << stream.rdbuf();
  return text.str();
}

ProgramResult RunProgram(const std::string& program, const std::string& arguments) {
  TemporaryDirectory directory;
  const std::string out = directory.File("out");
  const std::string err = directory.File("err");
  const std::string command = program + " " + arguments + " >" + out + " 2>" + err;
  const int status = std::system(command.c_str());
  ProgramResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = ReadText(out);
  result.err = ReadText(err);
  return result;
}

ProgramResult Plan(const std::string& arguments) {
  return RunProgram(DATALOADER_PLAN_PATH, arguments);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// The indices after "samples=" (',' and ';' both separate).
std::vector<int64_t> SamplesOf(const std::string& line) {
  std::string list = line.substr(line.rfind(" samples=") + 9);
  for (char& c : list) {
    if (c == ',' || c == ';') c = ' ';
  }
  std::istringstream stream(list);
  std::vector<int64_t> samples;
  for (int64_t value; stream >> value;) samples.push_back(value);
  return samples;
}

TEST(DataloaderPlan, PrintsOneLinePerStepWithTheRanksGlobalSampleIndices) {
  const ProgramResult result = Plan(
      "--num_samples=20 --micro_batch_size=2 --dp_size=2 --dp_rank=1 "
      "--gradient_accumulation_steps=2 --consumed_samples=8 --steps=3");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(Lines(result.out), (std::vector<std::string>{
                                   "step=0 epoch=0 consumed_samples=8 samples=10,11;14,15",
                                   "step=1 epoch=1 consumed_samples=20 samples=2,3;6,7",
                                   "step=2 epoch=1 consumed_samples=28 samples=10,11;14,15",
                               }));
}

TEST(DataloaderPlan, RanksTogetherReadEachShuffledSampleOncePerEpoch) {
  std::multiset<int64_t> read;
  for (int rank = 0; rank < 4; ++rank) {
    const ProgramResult result =
        Plan("--num_samples=64 --micro_batch_size=2 --dp_size=4 --dp_rank=" + std::to_string(rank) +
             " --shuffle --seed=5 --steps=8");
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const std::vector<std::string> lines = Lines(result.out);
    ASSERT_EQ(lines.size(), 8u);
    for (const std::string& line : lines) {
      EXPECT_NE(line.find("epoch=0"), std::string::npos) << line;
      for (int64_t sample : SamplesOf(line)) read.insert(sample);
    }
  }
  ASSERT_EQ(read.size(), 64u);
  for (int64_t sample = 0; sample < 64; ++sample) EXPECT_EQ(read.count(sample), 1u) << sample;
}

TEST(DataloaderPlan, ResumedPlanContinuesTheUninterruptedOne) {
  const std::string common =
      "--num_samples=50 --micro_batch_size=3 --dp_size=2 --dp_rank=0 "
      "--shuffle --seed=11 --pad_tail ";
  const std::vector<std::string> whole = Lines(Plan(common + "--steps=12").out);
  ASSERT_EQ(whole.size(), 12u);
  // Line 5 names the state before it; a plan from that state continues.
  const std::string state = whole[5].substr(whole[5].find("consumed_samples=") + 17);
  const std::vector<std::string> resumed =
      Lines(Plan(common + "--steps=7 --consumed_samples=" + state.substr(0, state.find(' '))).out);
  ASSERT_EQ(resumed.size(), 7u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(SamplesOf(resumed[i]), SamplesOf(whole[5 + i]));
}

void ExpectOneLineUsageError(const ProgramResult& result, const std::string& expected_words) {
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_TRUE(result.out.empty()) << result.out;
  EXPECT_EQ(Lines(result.err).size(), 1u) << result.err;
  EXPECT_NE(result.err.find(expected_words), std::string::npos) << result.err;
}

TEST(DataloaderPlan, RejectsARankOutsideTheGroupWithOneLine) {
  ExpectOneLineUsageError(Plan("--num_samples=20 --dp_size=2 --dp_rank=2"),
                          "--dp_rank=2: expected a rank in [0, --dp_size=2)");
}

TEST(DataloaderPlan, RejectsADatasetSmallerThanOneGlobalBatchWithOneLine) {
  ExpectOneLineUsageError(Plan("--num_samples=7 --micro_batch_size=4 --dp_size=2"),
                          "num_samples=7 is smaller than one global batch");
}

TEST(DataloaderPlan, RejectsMissingNumSamplesWithOneLine) {
  ExpectOneLineUsageError(Plan("--dp_size=2"), "--num_samples=0");
}

// Huge values: one line naming the flag, exit 2 (no bad_alloc, no product
// that overflows to 0 or to a negative size).
TEST(DataloaderPlan, RejectsAHugeMicroBatchWithOneLineNamingTheFlag) {
  ExpectOneLineUsageError(Plan("--num_samples=100 --micro_batch_size=1000000000000"),
                          "--micro_batch_size=1000000000000: expected a number in [1, 16777216]");
}

TEST(DataloaderPlan, RejectsAProductOfFlagsThatWouldOverflowWithOneLine) {
  // 2^16 x 2^16 x 2^32 is 2^64: 0 in 64-bit arithmetic.
  ExpectOneLineUsageError(
      Plan("--num_samples=100 --micro_batch_size=65536 --dp_size=65536 "
           "--gradient_accumulation_steps=4096"),
      "--micro_batch_size=65536 x --dp_size=65536 x --gradient_accumulation_steps=4096: expected "
      "a global batch of at most 16777216 samples");
}

TEST(DataloaderPlan, RejectsAShuffledEpochTooLargeToHoldWithOneLine) {
  ExpectOneLineUsageError(Plan("--num_samples=281474976710656 --shuffle"),
                          "--shuffle with 281474976710656 samples: expected at most");
}

TEST(DataloaderPlan, RejectsConsumedSamplesThatOverflowOverTheStepsWithOneLine) {
  ExpectOneLineUsageError(Plan("--num_samples=100 --consumed_samples=9223372036854775000"),
                          "--consumed_samples=9223372036854775000 with --steps=10 and 100 "
                          "samples: the sample count after the last step overflows");
}

TEST(DataloaderPlan, RejectsNegativeAndHugeStepsAndSequenceLengthsWithOneLine) {
  ExpectOneLineUsageError(Plan("--num_samples=100 --steps=-1"), "--steps=-1: expected a number");
  ExpectOneLineUsageError(Plan("--num_samples=100 --steps=9223372036854775807"),
                          "--steps=9223372036854775807: expected a number");
  ExpectOneLineUsageError(Plan("--num_samples=100 --dp_size=-4"),
                          "--dp_size=-4: expected a number in [1, 16777216]");
  ExpectOneLineUsageError(Plan("--data_file=/nonexistent --sequence_length=99999999999"),
                          "--sequence_length=99999999999: expected a number in [1, 1073741824]");
}

// Every count flag has an upper bound, said with the flag, the value and the
// range (before, --steps went to 2^63 and --num_samples had none).
TEST(DataloaderPlan, RejectsCountsAboveTheirBoundNamingTheRange) {
  ExpectOneLineUsageError(Plan("--num_samples=100 --steps=1000000001"),
                          "--steps=1000000001: expected a number in [0, 1000000000]");
  ExpectOneLineUsageError(Plan("--num_samples=281474976710657"),
                          "--num_samples=281474976710657: expected a number in [1, "
                          "281474976710656]");
  ExpectOneLineUsageError(Plan("--num_samples=100 --gradient_accumulation_steps=16777217"),
                          "--gradient_accumulation_steps=16777217: expected a number in [1, "
                          "16777216]");
}

TEST(DataloaderPlan, LargestAcceptedGlobalBatchStillPlans) {
  const ProgramResult result =
      Plan("--num_samples=16777216 --micro_batch_size=4096 --dp_size=4096 --steps=1");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  ASSERT_EQ(Lines(result.out).size(), 1u);
  EXPECT_EQ(SamplesOf(Lines(result.out)[0]).size(), 4096u);
}

TEST(MakeTokenBin, ConvertsTextToATokenFileThePlanToolReads) {
  TemporaryDirectory directory;
  const std::string text_path = directory.File("corpus.txt");
  const std::string bin_path = directory.File("corpus.bin");
  std::ofstream(text_path) << "hello, tokens!";
  const ProgramResult made =
      RunProgram(MAKE_TOKEN_BIN_PATH, "--input=" + text_path + " --output=" + bin_path);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  TokenFile file(bin_path);
  ASSERT_EQ(file.num_tokens(), 14);
  EXPECT_EQ(file.tokens()[0], uint32_t{'h'});
  EXPECT_EQ(file.tokens()[13], uint32_t{'!'});

  // 14 tokens, sequence_length 4: (14 - 1) / 4 = 3 samples.
  const ProgramResult plan =
      Plan("--data_file=" + bin_path + " --sequence_length=4 --micro_batch_size=3 --steps=2");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_EQ(Lines(plan.out), (std::vector<std::string>{
                                 "step=0 epoch=0 consumed_samples=0 samples=0,1,2",
                                 "step=1 epoch=1 consumed_samples=3 samples=0,1,2",
                             }));
}

TEST(MakeTokenBin, ConvertsWhitespaceSeparatedIds) {
  TemporaryDirectory directory;
  const std::string ids_path = directory.File("ids.txt");
  const std::string bin_path = directory.File("ids.bin");
  std::ofstream(ids_path) << "50256 15496\n11 0\n65535\n";
  const ProgramResult made = RunProgram(
      MAKE_TOKEN_BIN_PATH, "--input=" + ids_path + " --output=" + bin_path + " --input_format=ids");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  TokenFile file(bin_path);
  EXPECT_EQ(testing::ToVector(file.tokens()), (std::vector<uint32_t>{50256, 15496, 11, 0, 65535}));
}

TEST(MakeTokenBin, RejectsAnIdOutOfRangeWithOneLineNamingTheLine) {
  TemporaryDirectory directory;
  const std::string ids_path = directory.File("ids.txt");
  std::ofstream(ids_path) << "1 2\n3 65536\n";
  ExpectOneLineUsageError(
      RunProgram(MAKE_TOKEN_BIN_PATH, "--input=" + ids_path + " --output=" +
                                          directory.File("x.bin") + " --input_format=ids"),
      "line 2: token '65536'");
}

TEST(MakeTokenBin, RejectsAMissingInputWithOneLine) {
  TemporaryDirectory directory;
  ExpectOneLineUsageError(
      RunProgram(MAKE_TOKEN_BIN_PATH,
                 "--input=" + directory.File("nope.txt") + " --output=" + directory.File("x.bin")),
      "cannot open --input=");
}

TEST(DataloaderPlan, RejectsAForeignDataFileWithOneLine) {
  TemporaryDirectory directory;
  const std::string path = directory.File("foreign.bin");
  std::ofstream(path) << std::string(4096, 'x');
  ExpectOneLineUsageError(Plan("--data_file=" + path + " --sequence_length=8"), "has magic");
}

// A value holding a newline is echoed escaped: the error stays one line that
// shows the value as "\n". (The shell keeps a newline inside single quotes.)
TEST(DataloaderTools, ValuesWithANewlineAreEchoedEscapedOnOneLine) {
  TemporaryDirectory directory;
  const std::string input = directory.File("in.txt");
  std::ofstream(input) << "1 2\n";
  ExpectOneLineUsageError(
      RunProgram(MAKE_TOKEN_BIN_PATH, "--input=" + input + " --output=" + directory.File("x.bin") +
                                          " '--input_format=ids\nx'"),
      "--input_format='ids\\nx'");
  ExpectOneLineUsageError(
      RunProgram(MAKE_TOKEN_BIN_PATH,
                 "'--input=/nonexistent/a\nb.txt' --output=" + directory.File("x.bin")),
      "--input='/nonexistent/a\\nb.txt'");
  ExpectOneLineUsageError(Plan("'--data_file=/nonexistent/a\nb.bin' --sequence_length=8"),
                          "'/nonexistent/a\\nb.bin'");
}

}  // namespace
}  // namespace infini::data
