// The one command-line parser of every program of the project (infini_run,
// ccl_bench, gpt2, the gflags tools through infini/common/flags.h): a
// program declares its flags once, in a table, and gets
//   --flag=value, --flag value, -flag (one dash), --flag_name and --flag-name,
//   -X3, -X 3 and -X=3 for a flag with a letter (torchrun's -r3, nccl-tests'
//   -b8), --flag / --noflag / --flag=false for a switch, `--` ending the
//   flags, the positional rest, "did you mean --x?" for an unknown flag,
//   a default from an environment variable (torchrun's PET_NNODES), and
//   --help made of the table only (infini/common/usage.h's format).
// Every refusal is one UsageError line naming the flag, the value and what
// was expected; programs print it and exit 2 (flags::kUsageExitCode).
//
// Target infini_common_cli (static, depends on nothing but infini_common).
#pragma once

#include <climits>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "infini/common/usage.h"

namespace infini::cli {

// A user's mistake on the command line. Programs derive their own
// UsageError from it, so a refusal thrown by a flag's check keeps its type.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message)
      : std::runtime_error(message), message_(message) {}
  const char* what() const noexcept override { return message_.c_str(); }
  // Names how the value was given ("-b " before "--min_bytes='x': ...").
  void Prepend(std::string_view prefix) { message_.insert(0, prefix); }

 private:
  std::string message_;
};

enum class FlagType {
  kSwitch,   // --x, --nox, --x=true|false|1|0|yes|no
  kText,     // any text, checked by the program (check or on_set)
  kInteger,  // a whole number in [min, max]
  kNumber,   // a finite decimal number in [min, max]
};

struct Flag {
  std::string name;  // underscores; --name-with-dashes is the same flag
  FlagType type = FlagType::kText;
  std::string default_value;  // as text; "true"/"false" for a switch
  // Shown in --help; empty: an alias or a hidden flag (not listed).
  std::string help;
  char letter = '\0';  // -X: its one-letter spelling, if any
  // A variable whose value is the default when set (PET_NNODES); its value
  // is checked as a command line's would be, and a refusal names it.
  std::string environment;
  long long min = LLONG_MIN;  // kInteger and kNumber bounds
  long long max = LLONG_MAX;
  // What a bad value is told to be instead of the type's words.
  std::string expected;
  // A value only after '=' (--dump_stacks[=RUN_ID]): alone, it is "".
  bool value_optional = false;
  // --help: the value's name (VALUE by default) and whether the default is
  // shown.
  std::string value_name;
  bool show_default = true;
  // The value given through the letter, as the long flag takes it
  // (nccl-tests' -d half -> --dtype=float16). May throw UsageError.
  std::function<std::string(std::string_view)> letter_value;
  // Runs for each value given on the command line, in order, after the
  // type's check (a refusal it throws is prefixed with the letter when the
  // letter was used). The program's own meaning of the value.
  std::function<void(const std::string& value)> on_set;
};

struct Program {
  std::string name;        // in messages: "unknown flag '--x' (see NAME --help)"
  std::string usage_line;  // "infini_run [FLAGS] [--] PROGRAM [ARGS...]"
  std::string description;
  std::string epilogue;
  // Positional words: kRefused ("unexpected argument"), kAnywhere (kept in
  // order, flags go on), or kEndFlags (the first one and all after it are
  // the positional rest: infini_run's program and its arguments).
  enum class Positional { kRefused, kAnywhere, kEndFlags };
  Positional positional = Positional::kRefused;
  // Said after an unknown flag's line ("; the program's own flags go ...").
  std::string unknown_flag_hint;
  // Flags accepted and set elsewhere, not listed (glog's in the gflags
  // tools): `accept(name)` says whether one exists, and whether it is a
  // switch; `set(name, value)` sets it or throws UsageError.
  std::function<bool(const std::string& name, bool* is_switch)> accept_other;
  std::function<void(const std::string& name, const std::string& value)> set_other;
};

class CommandLine {
 public:
  CommandLine(Program program, std::vector<Flag> flags);

  // Parses `arguments` (argv without argv[0]). `environment` (NAME=value
  // entries, null-terminated; null: none read) gives the defaults of the
  // flags that name a variable. Returns false when --help (-h, --helpfull)
  // was asked for: print Usage(). Throws UsageError.
  bool Parse(const std::vector<std::string>& arguments, char* const* environment = nullptr);
  bool ParseArgv(int argc, const char* const* argv, char* const* environment = nullptr);

  // Each flag's value after Parse: the command line's last, else its
  // variable's, else the table's default. Throws std::out_of_range for a
  // name not in the table (a program's bug, not a user's).
  const std::string& operator[](std::string_view name) const;
  bool Switch(std::string_view name) const;
  long long Integer(std::string_view name) const;
  double Number(std::string_view name) const;
  // Whether the command line gave it (not the variable, not the default).
  bool Given(std::string_view name) const;
  // The variable its value came from, or empty.
  std::string VariableOf(std::string_view name) const;
  // `message` with "(--x came from PET_X)" for each flag it names whose
  // value came from a variable.
  std::string NameSources(const std::string& message) const;
  // Flags in command-line order, as (name, value).
  const std::vector<std::pair<std::string, std::string>>& given() const { return given_; }
  const std::vector<std::string>& positional() const { return positional_; }

  std::string Usage() const;
  std::span<const Flag> flags() const { return flags_; }
  const Flag* Find(std::string_view name) const;  // underscores or dashes
  // The flag a mistyped `name` most likely meant (a few letters off, or a
  // unique prefix of at least 3 letters), or empty.
  std::string Nearest(std::string_view name) const;

 private:
  struct Value {
    std::string text;
    std::string variable;  // set from this variable
    bool given = false;
  };
  const Value& ValueOf(std::string_view name) const;
  const Flag* FindLetter(char letter) const;
  std::string Check(const Flag& flag, const std::string& value) const;
  void Set(const Flag& flag, const std::string& value, std::string_view spelled);
  [[noreturn]] void Unknown(const std::string& spelled, const std::string& name) const;

  Program program_;
  std::vector<Flag> flags_;
  std::map<std::string, Value, std::less<>> values_;
  std::vector<std::pair<std::string, std::string>> given_;
  std::vector<std::string> positional_;
};

// "true"/"1"/"yes" -> true, "false"/"0"/"no" -> false; else nullopt-like:
// returns false and leaves *value alone.
bool ParseSwitchValue(std::string_view text, bool* value);

}  // namespace infini::cli
