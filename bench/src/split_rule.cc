// --split and nccl-tests' NCCL_TESTS_SPLIT / NCCL_TESTS_SPLIT_MASK: the
// colour of each rank (bench_options.h, SplitRule).
#include <cctype>
#include <charconv>
#include <string>

#include "bench_options.h"
#include "infini/common/one_line.h"
#include "infini/common/usage.h"

namespace infini::bench {

int SplitRule::Color(int global_rank) const {
  const int64_t rank = global_rank;
  switch (operation) {
    case Operation::kAnd:
      return static_cast<int>(rank & value);
    case Operation::kOr:
      return static_cast<int>(rank | value);
    case Operation::kMod:
      return static_cast<int>(rank % value);
    case Operation::kDiv:
      return static_cast<int>(rank / value);
    case Operation::kNone:
      break;
  }
  return 0;
}

SplitRule ParseSplitRule(std::string_view flag, std::string_view text) {
  const std::string expected =
      "an operation and a value: 'MOD 2', '%2', 'AND 0x7', '&0x7', 'OR 7', 'DIV 8' (nccl-tests' "
      "NCCL_TESTS_SPLIT)";
  struct Spelling {
    std::string_view word;
    SplitRule::Operation operation;
  };
  constexpr Spelling kSpellings[] = {
      {"AND", SplitRule::Operation::kAnd}, {"&", SplitRule::Operation::kAnd},
      {"OR", SplitRule::Operation::kOr},   {"|", SplitRule::Operation::kOr},
      {"MOD", SplitRule::Operation::kMod}, {"%", SplitRule::Operation::kMod},
      {"DIV", SplitRule::Operation::kDiv}, {"/", SplitRule::Operation::kDiv}};
  SplitRule rule;
  rule.text = std::string(text);
  std::string_view rest = text;
  for (const Spelling& spelling : kSpellings) {
    if (rest.size() < spelling.word.size()) continue;
    bool same = true;
    for (size_t index = 0; index < spelling.word.size(); ++index) {
      same = same && std::toupper(static_cast<unsigned char>(rest[index])) == spelling.word[index];
    }
    if (!same) continue;
    rule.operation = spelling.operation;
    rest.remove_prefix(spelling.word.size());
    break;
  }
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  int base = 10;
  if (rest.size() > 2 && rest[0] == '0' && (rest[1] == 'x' || rest[1] == 'X')) base = 16;
  if (rest.size() > 2 && rest[0] == '0' && (rest[1] == 'b' || rest[1] == 'B')) base = 2;
  if (base != 10) rest.remove_prefix(2);
  const auto [end, error] =
      std::from_chars(rest.data(), rest.data() + rest.size(), rule.value, base);
  const bool divides =
      rule.operation == SplitRule::Operation::kMod || rule.operation == SplitRule::Operation::kDiv;
  if (rule.operation == SplitRule::Operation::kNone || rest.empty() || error != std::errc() ||
      end != rest.data() + rest.size() || rule.value < 0 || rule.value > (1 << 30) ||
      (divides && rule.value == 0)) {
    if (flag.rfind("NCCL_TESTS", 0) == 0) {
      throw UsageError(std::string(flag) + "='" + OneLine(text) + "': expected " + expected);
    }
    throw UsageError(flags::BadValueMessage(flag, text, expected));
  }
  return rule;
}

void ApplySplitEnvironment(const std::function<const char*(const char*)>& getenv,
                           BenchOptions* options) {
  if (options->split.active()) return;  // --split wins
  if (const char* mask = getenv("NCCL_TESTS_SPLIT_MASK"); mask != nullptr && *mask != '\0') {
    std::string_view value = mask;
    // nccl-tests reads the mask with strtoul(…, 16): hex with or without 0x.
    if (value.size() > 2 && value[0] == '0' && (value[1] == 'x' || value[1] == 'X')) {
      value.remove_prefix(2);
    }
    options->split = ParseSplitRule("NCCL_TESTS_SPLIT_MASK", "AND 0x" + std::string(value));
    options->split.text = "NCCL_TESTS_SPLIT_MASK=" + std::string(mask);
    return;
  }
  if (const char* rule = getenv("NCCL_TESTS_SPLIT"); rule != nullptr && *rule != '\0') {
    options->split = ParseSplitRule("NCCL_TESTS_SPLIT", rule);
  }
}

}  // namespace infini::bench
