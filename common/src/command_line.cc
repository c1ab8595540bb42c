#include "infini/common/command_line.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "infini/common/one_line.h"

namespace infini::cli {
namespace {

std::string Underscored(std::string_view name) {
  std::string out(name);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

bool IsHelpName(std::string_view name) {
  return name == "help" || name == "h" || name == "helpfull" || name == "helpshort";
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string ExpectedOf(const Flag& flag) {
  if (!flag.expected.empty()) return flag.expected;
  switch (flag.type) {
    case FlagType::kSwitch:
      return "true or false";
    case FlagType::kInteger:
      if (flag.min == LLONG_MIN && flag.max == LLONG_MAX) return "an integer";
      return "an integer from " + std::to_string(flag.min) + " to " + std::to_string(flag.max);
    case FlagType::kNumber:
      return "a number from " + std::to_string(flag.min) + " to " + std::to_string(flag.max);
    case FlagType::kText:
      break;
  }
  return "a value";
}

}  // namespace

bool ParseSwitchValue(std::string_view text, bool* value) {
  if (text == "true" || text == "1" || text == "yes") {
    *value = true;
    return true;
  }
  if (text == "false" || text == "0" || text == "no") {
    *value = false;
    return true;
  }
  return false;
}

CommandLine::CommandLine(Program program, std::vector<Flag> flags)
    : program_(std::move(program)), flags_(std::move(flags)) {
  for (const Flag& flag : flags_) values_[flag.name] = Value{flag.default_value, "", false};
}

const Flag* CommandLine::Find(std::string_view name) const {
  const std::string wanted = Underscored(name);
  for (const Flag& flag : flags_) {
    if (flag.name == wanted) return &flag;
  }
  return nullptr;
}

const Flag* CommandLine::FindLetter(char letter) const {
  for (const Flag& flag : flags_) {
    if (flag.letter != '\0' && flag.letter == letter) return &flag;
  }
  return nullptr;
}

std::string CommandLine::Nearest(std::string_view name) const {
  const std::string wanted = Underscored(name);
  std::string best;
  size_t best_distance = std::max<size_t>(2, wanted.size() / 3) + 1;  // farther: no guess
  std::vector<std::string> prefixed;
  for (const Flag& flag : flags_) {
    if (wanted.size() >= 3 && flag.name.rfind(wanted, 0) == 0) prefixed.push_back(flag.name);
    const size_t distance = EditDistance(wanted, flag.name);
    if (distance < best_distance) {
      best_distance = distance;
      best = flag.name;
    }
  }
  if (best.empty() && prefixed.size() == 1) return prefixed.front();
  return best;
}

// Empty when `value` is one the flag's type takes, else what was expected.
std::string CommandLine::Check(const Flag& flag, const std::string& value) const {
  switch (flag.type) {
    case FlagType::kSwitch: {
      bool unused = false;
      return ParseSwitchValue(value, &unused) ? "" : ExpectedOf(flag);
    }
    case FlagType::kInteger: {
      long long parsed = 0;
      const char* end = value.data() + value.size();
      const auto [stop, error] = std::from_chars(value.data(), end, parsed);
      const bool valid = !value.empty() && error == std::errc() && stop == end &&
                         parsed >= flag.min && parsed <= flag.max;
      return valid ? "" : ExpectedOf(flag);
    }
    case FlagType::kNumber: {
      char* end = nullptr;
      const double parsed = std::strtod(value.c_str(), &end);
      const bool valid = !value.empty() && end == value.c_str() + value.size() &&
                         std::isfinite(parsed) && parsed >= static_cast<double>(flag.min) &&
                         parsed <= static_cast<double>(flag.max);
      return valid ? "" : ExpectedOf(flag);
    }
    case FlagType::kText:
      break;
  }
  return "";
}

void CommandLine::Set(const Flag& flag, const std::string& given_value, std::string_view spelled) {
  const bool by_letter = spelled.size() == 2 && spelled[0] == '-' && spelled[1] != '-';
  // A refusal of a value given by letter names the letter too, unless it
  // already starts with it.
  auto named = [&](UsageError& error) {
    if (!by_letter) return;
    const std::string_view what = error.what();
    if (what.rfind(spelled, 0) == 0) return;
    error.Prepend(std::string(spelled) + " ");
  };
  std::string value = given_value;
  try {
    if (by_letter && flag.letter_value) value = flag.letter_value(value);
    if (const std::string expected = Check(flag, value); !expected.empty()) {
      throw UsageError(flags::BadValueMessage(flag.name, value, expected));
    }
    if (flag.type == FlagType::kSwitch) {
      bool on = false;
      ParseSwitchValue(value, &on);
      value = on ? "true" : "false";
    }
    values_[flag.name] = Value{value, "", true};
    given_.emplace_back(flag.name, value);
    if (flag.on_set) flag.on_set(value);
  } catch (UsageError& error) {
    named(error);
    throw;
  }
}

void CommandLine::Unknown(const std::string& spelled, const std::string& name) const {
  const std::string guess = Nearest(name);
  throw UsageError(flags::UnknownFlagMessage(program_.name, spelled) +
                   (guess.empty() ? "" : "; did you mean --" + guess + "?") +
                   program_.unknown_flag_hint);
}

bool CommandLine::ParseArgv(int argc, const char* const* argv, char* const* environment) {
  std::vector<std::string> arguments;
  for (int index = 1; index < argc; ++index) arguments.emplace_back(argv[index]);
  return Parse(arguments, environment);
}

bool CommandLine::Parse(const std::vector<std::string>& arguments, char* const* environment) {
  given_.clear();
  positional_.clear();
  for (const Flag& flag : flags_) {
    Value value{flag.default_value, "", false};
    if (environment != nullptr && !flag.environment.empty()) {
      const std::string prefix = flag.environment + "=";
      for (char* const* entry = environment; *entry != nullptr; ++entry) {
        if (std::string_view(*entry).substr(0, prefix.size()) != prefix) continue;
        std::string text = *entry + prefix.size();
        if (const std::string expected = Check(flag, text); !expected.empty()) {
          throw UsageError(flag.environment + "='" + OneLine(text) + "': expected " +
                           (flag.type == FlagType::kSwitch ? "0 or 1" : expected) +
                           " (the default of --" + flag.name + ")");
        }
        if (flag.type == FlagType::kSwitch) {
          bool on = false;
          ParseSwitchValue(text, &on);
          text = on ? "true" : "false";
        }
        value = Value{text, flag.environment, false};
      }
    }
    values_[flag.name] = value;
  }
  bool flags_ended = false;
  for (size_t index = 0; index < arguments.size(); ++index) {
    const std::string& argument = arguments[index];
    if (flags_ended || argument.size() < 2 || argument[0] != '-') {
      if (!flags_ended && program_.positional == Program::Positional::kEndFlags) {
        flags_ended = true;
      }
      if (program_.positional == Program::Positional::kRefused) {
        throw UsageError("unexpected argument '" + OneLine(argument) +
                         "': expected --flag=value (see " + program_.name + " --help)");
      }
      positional_.push_back(argument);
      continue;
    }
    if (argument == "--") {
      flags_ended = true;
      continue;
    }
    const bool two_dashes = argument[1] == '-';
    const std::string body = argument.substr(two_dashes ? 2 : 1);
    size_t equals = body.find('=');
    std::string name = Underscored(body.substr(0, equals));
    if (IsHelpName(name)) return false;
    const Flag* flag = Find(name);
    std::string spelled = argument.substr(0, argument.find('='));
    std::string value;
    bool has_value = equals != std::string::npos;
    if (has_value) value = body.substr(equals + 1);
    // One dash and no long name: a letter, its value attached (-r3, -r=3)
    // or next (-r 3). A word close to a long name stays that mistyped name
    // (-rdvz_id is not -r dvz_id).
    bool letter_takes_value = false;
    if (flag == nullptr && !two_dashes) {
      if (const Flag* lettered = FindLetter(body[0])) {
        // A switch's letter stands alone (torchrun's -m) unless it reads a
        // value of its own (nccl-tests' -c 1).
        letter_takes_value = lettered->type != FlagType::kSwitch || lettered->letter_value;
        const std::string rest = body.substr(1);
        const bool looks_long = !rest.empty() &&
                                std::isalpha(static_cast<unsigned char>(rest[0])) &&
                                (!letter_takes_value || !Nearest(name).empty());
        if (!looks_long) {
          flag = lettered;
          spelled = std::string("-") + body[0];
          has_value = !rest.empty();
          value = !rest.empty() && rest[0] == '=' ? rest.substr(1) : rest;
          if (has_value && !letter_takes_value && rest[0] != '=') flag = nullptr;
        }
      } else if (body.size() == 1 || !std::isalpha(static_cast<unsigned char>(body[1]))) {
        spelled = argument.substr(0, 2);  // an unknown letter (-q, -x7)
      }
    }
    if (flag == nullptr && !has_value && name.rfind("no", 0) == 0) {
      const Flag* negated = Find(name.substr(2));
      if (negated != nullptr && negated->type == FlagType::kSwitch) {
        Set(*negated, "false", spelled);
        continue;
      }
    }
    if (flag == nullptr) {
      bool is_switch = false;
      if (program_.accept_other && program_.accept_other(name, &is_switch)) {
        if (!has_value && is_switch) {
          value = "true";
        } else if (!has_value) {
          if (index + 1 >= arguments.size()) {
            throw UsageError(flags::MissingValueMessage(program_.name, name));
          }
          value = arguments[++index];
        }
        program_.set_other(name, value);
        continue;
      }
      bool negated_other = false;
      if (!has_value && name.rfind("no", 0) == 0 && program_.accept_other &&
          program_.accept_other(name.substr(2), &negated_other) && negated_other) {
        program_.set_other(name.substr(2), "false");
        continue;
      }
      Unknown(spelled, name);
    }
    if (!has_value) {
      if (flag->type == FlagType::kSwitch && !letter_takes_value) {
        value = "true";
      } else if (flag->value_optional) {
        value = "";
      } else if (index + 1 < arguments.size()) {
        value = arguments[++index];
      } else {
        throw UsageError(spelled.size() == 2 && spelled[1] != '-'
                             ? spelled + " needs a value (see " + program_.name + " --help)"
                             : flags::MissingValueMessage(program_.name, flag->name));
      }
    }
    Set(*flag, value, spelled);
  }
  return true;
}

const CommandLine::Value& CommandLine::ValueOf(std::string_view name) const {
  const auto found = values_.find(Underscored(name));
  if (found == values_.end()) {
    throw std::out_of_range("no flag --" + std::string(name) + " in " + program_.name + "'s table");
  }
  return found->second;
}

const std::string& CommandLine::operator[](std::string_view name) const {
  return ValueOf(name).text;
}

bool CommandLine::Switch(std::string_view name) const {
  bool on = false;
  ParseSwitchValue(ValueOf(name).text, &on);
  return on;
}

long long CommandLine::Integer(std::string_view name) const {
  return std::strtoll(ValueOf(name).text.c_str(), nullptr, 10);
}

double CommandLine::Number(std::string_view name) const {
  return std::strtod(ValueOf(name).text.c_str(), nullptr);
}

bool CommandLine::Given(std::string_view name) const { return ValueOf(name).given; }

std::string CommandLine::VariableOf(std::string_view name) const { return ValueOf(name).variable; }

std::string CommandLine::NameSources(const std::string& message) const {
  std::string named = message;
  for (const auto& [name, value] : values_) {
    if (!value.variable.empty() && message.find("--" + name) != std::string::npos) {
      named += " (--" + name + " came from " + value.variable + ")";
    }
  }
  return named;
}

std::string CommandLine::Usage() const {
  std::vector<flags::FlagHelp> shown;
  for (const Flag& flag : flags_) {
    if (flag.help.empty()) continue;
    flags::FlagHelp help;
    help.name = flag.name;
    help.letter = flag.letter;
    const bool is_switch = flag.type == FlagType::kSwitch;
    help.value_name = is_switch ? "" : flag.value_name.empty() ? "VALUE" : flag.value_name;
    if (flag.show_default) {
      help.default_value = is_switch || flag.type != FlagType::kText
                               ? flag.default_value
                               : "\"" + OneLine(flag.default_value) + "\"";
    }
    help.help = flag.help;
    shown.push_back(std::move(help));
  }
  return flags::FormatUsage(program_.usage_line, program_.description, shown, program_.epilogue);
}

}  // namespace infini::cli
