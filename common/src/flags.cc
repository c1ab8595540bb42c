#include "infini/common/flags.h"

#include <gflags/gflags.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace infini::flags {
namespace {

// The project's sources; a flag defined in a file under it is the
// program's own (gflags records each flag's __FILE__, an absolute path in
// this build). Set by common/CMakeLists.txt.
constexpr std::string_view kSourceRoot = INFINI_CCL_SOURCE_ROOT;

std::string ProgramName(const char* argv0) {
  const std::string path = argv0 ? argv0 : "program";
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

[[noreturn]] void Refuse(const std::string& program, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), message.c_str());
  std::exit(kUsageExitCode);
}

std::string ValueName(const std::string& type) {
  if (type == "bool") return "";
  if (type == "string") return "STRING";
  if (type == "double") return "NUMBER";
  if (type == "uint32" || type == "uint64") return "UINT";
  return "INT";
}

}  // namespace

std::string ExpectedValue(std::string_view gflags_type) {
  if (gflags_type == "bool") return "true or false";
  if (gflags_type == "int32") return "a 32-bit integer";
  if (gflags_type == "uint32") return "a non-negative 32-bit integer";
  if (gflags_type == "int64") return "a 64-bit integer";
  if (gflags_type == "uint64") return "a non-negative 64-bit integer";
  if (gflags_type == "double") return "a number";
  return "a " + std::string(gflags_type);
}

std::vector<FlagHelp> OwnFlags() {
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);
  std::vector<FlagHelp> own;
  for (const gflags::CommandLineFlagInfo& info : all) {
    if (info.filename.rfind(kSourceRoot, 0) != 0) continue;
    FlagHelp help{info.name, ValueName(info.type), info.default_value, info.description};
    if (info.type == "string") help.default_value = "\"" + OneLine(info.default_value) + "\"";
    own.push_back(std::move(help));
  }
  std::sort(own.begin(), own.end(),
            [](const FlagHelp& a, const FlagHelp& b) { return a.name < b.name; });
  return own;
}

void Parse(int* argc, char*** argv, std::string_view usage_line, std::string_view description) {
  const std::string program = ProgramName(*argc > 0 ? (*argv)[0] : nullptr);
  std::vector<char*> kept;
  if (*argc > 0) kept.push_back((*argv)[0]);
  bool flags_ended = false;
  for (int index = 1; index < *argc; ++index) {
    const std::string argument = (*argv)[index];
    if (flags_ended || argument.size() < 2 || argument[0] != '-') {
      kept.push_back((*argv)[index]);
      continue;
    }
    if (argument == "--") {
      flags_ended = true;
      continue;
    }
    if (IsHelpFlag(argument)) {
      std::fputs(FormatUsage(usage_line, description, OwnFlags()).c_str(), stdout);
      std::exit(0);
    }
    const std::string body = argument.substr(argument[1] == '-' ? 2 : 1);
    const size_t equals = body.find('=');
    std::string name = body.substr(0, equals);
    std::string value;
    gflags::CommandLineFlagInfo info;
    bool found = gflags::GetCommandLineFlagInfo(name.c_str(), &info);
    if (equals != std::string::npos) {
      value = body.substr(equals + 1);
    } else if (found && info.type == "bool") {
      value = "true";
    } else if (!found && name.rfind("no", 0) == 0 &&
               gflags::GetCommandLineFlagInfo(name.substr(2).c_str(), &info) &&
               info.type == "bool") {
      found = true;
      name = name.substr(2);
      value = "false";
    } else if (found) {
      if (index + 1 >= *argc) Refuse(program, MissingValueMessage(program, name));
      value = (*argv)[++index];
    }
    if (!found) Refuse(program, UnknownFlagMessage(program, "--" + name));
    if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
      Refuse(program,
             BadValueMessage(name, value,
                             ExpectedValue(info.type) +
                                 (info.has_validator_fn ? " that its check accepts" : "")));
    }
  }
  // gflags keeps argv for its own reports (gflags::GetArgv).
  gflags::SetArgv(*argc, const_cast<const char**>(*argv));
  for (size_t i = 0; i < kept.size(); ++i) (*argv)[i] = kept[i];
  *argc = static_cast<int>(kept.size());
  (*argv)[*argc] = nullptr;
}

}  // namespace infini::flags
