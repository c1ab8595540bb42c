// The one format of every program's --help and of its refusal of a flag.
//
// Every program of the project (the gflags tools, infini_run, gpt2,
// ccl_bench) prints its usage the same way: a usage line, what it does, and
// only its own flags with their value, default and help; and refuses an
// unknown flag or a bad value with one line of the same shape, exit code 2.
// Every program gets all of it from the one parser,
// infini/common/command_line.h (the gflags programs through
// infini::flags::Parse, infini/common/flags.h), which calls these
// functions.
//
// Header-only and dependency-free, like one_line.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "infini/common/one_line.h"

namespace infini::flags {

// The exit code of a refused command line (an unknown flag, a bad value).
inline constexpr int kUsageExitCode = 2;

// One flag as --help shows it.
struct FlagHelp {
  std::string name;           // without dashes
  std::string value_name;     // STRING, INT, NUMBER...; empty: a switch (--name, --noname)
  std::string default_value;  // as shown after "default: "; empty: no default shown
  std::string help;
  char letter = '\0';  // its one-letter spelling (-r), if any
};

// `text` broken into lines of at most `width` columns (a longer word stays
// whole), each after `indent` spaces, each ending in '\n'.
inline std::string Wrapped(std::string_view text, size_t indent, size_t width = 80) {
  std::string out;
  std::string line;
  auto flush = [&] {
    if (!line.empty()) out += std::string(indent, ' ') + line + "\n";
    line.clear();
  };
  size_t start = 0;
  while (start < text.size()) {
    if (text[start] == '\n') {
      flush();
      ++start;
      continue;
    }
    if (text[start] == ' ') {
      ++start;
      continue;
    }
    size_t end = text.find_first_of(" \n", start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(start, end - start);
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) flush();
    if (!line.empty()) line += ' ';
    line += word;
    start = end;
  }
  flush();
  return out;
}

// "  --name=VALUE (default: D)\n      help, wrapped\n" ("... (default: D)
// or -r\n" with a letter).
inline std::string FormatFlag(const FlagHelp& flag) {
  std::string out = "  --" + flag.name;
  out += flag.value_name.empty() ? "[=BOOL]" : "=" + flag.value_name;
  if (!flag.default_value.empty()) out += " (default: " + flag.default_value + ")";
  if (flag.letter != '\0') out += std::string(" or -") + flag.letter;
  out += "\n";
  out += Wrapped(flag.help, 6);
  return out;
}

// The whole --help text:
//   usage: USAGE_LINE
//   (blank line, DESCRIPTION as written, if any)
//   (blank line) flags:, each flag as FormatFlag shows it
//   (blank line, EPILOGUE as written, if any)
inline std::string FormatUsage(std::string_view usage_line, std::string_view description,
                               const std::vector<FlagHelp>& flags, std::string_view epilogue = {}) {
  std::string out = "usage: " + std::string(usage_line) + "\n";
  if (!description.empty()) {
    out += "\n" + std::string(description);
    if (description.back() != '\n') out += "\n";
  }
  if (!flags.empty()) {
    out += "\nflags:\n";
    for (const FlagHelp& flag : flags) out += FormatFlag(flag);
  }
  if (!epilogue.empty()) {
    out += "\n" + std::string(epilogue);
    if (epilogue.back() != '\n') out += "\n";
  }
  return out;
}

// "unknown flag '--x' (see PROGRAM --help)"; `flag` as the user wrote its
// name (dashes included), echoed escaped.
inline std::string UnknownFlagMessage(std::string_view program, std::string_view flag) {
  return "unknown flag '" + OneLine(flag) + "' (see " + std::string(program) + " --help)";
}

// "--name='value'": how a refusal names a flag and the value it got.
inline std::string QuotedFlag(std::string_view name, std::string_view value) {
  return "--" + std::string(name) + "='" + OneLine(value) + "'";
}

// "--name='value': expected EXPECTED".
inline std::string BadValueMessage(std::string_view name, std::string_view value,
                                   std::string_view expected) {
  return QuotedFlag(name, value) + ": expected " + std::string(expected);
}

// "--name needs a value (see PROGRAM --help)".
inline std::string MissingValueMessage(std::string_view program, std::string_view name) {
  return "--" + OneLine(name) + " needs a value (see " + std::string(program) + " --help)";
}

// Whether `argument` asks for help: --help, -help, -h, --helpfull, --helpshort.
inline bool IsHelpFlag(std::string_view argument) {
  return argument == "--help" || argument == "-help" || argument == "-h" ||
         argument == "--helpfull" || argument == "-helpfull" || argument == "--helpshort" ||
         argument == "-helpshort";
}

}  // namespace infini::flags
