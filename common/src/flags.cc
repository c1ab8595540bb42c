#include "infini/common/flags.h"

#include <gflags/gflags.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "infini/common/command_line.h"

namespace infini::flags {
namespace {

// The project's sources; a flag defined in a file under it is the
// program's own (gflags records each flag's __FILE__, an absolute path in
// this build). Set by common/CMakeLists.txt.
constexpr std::string_view kSourceRoot = INFINI_CCL_SOURCE_ROOT;

// A relative __FILE__ is ours too: ccache's CCACHE_BASEDIR rewrites the
// paths of this build relative. gflags' and glog's own flags are not, even
// from a library built with relative paths (reproducible builds).
bool IsOwnFlag(const std::string& filename) {
  if (filename.rfind(kSourceRoot, 0) == 0) return true;
  return !filename.empty() && filename[0] != '/' && filename.find("gflags") == std::string::npos &&
         filename.find("glog") == std::string::npos;
}

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
    if (!IsOwnFlag(info.filename)) continue;
    FlagHelp help{info.name, ValueName(info.type), info.default_value, info.description};
    if (info.type == "string") help.default_value = "\"" + OneLine(info.default_value) + "\"";
    own.push_back(std::move(help));
  }
  std::sort(own.begin(), own.end(),
            [](const FlagHelp& a, const FlagHelp& b) { return a.name < b.name; });
  return own;
}

namespace {

// gflags' flag `info` as a row of the one parser's table: it checks the
// spelling and the value's kind, gflags stores the value (and runs the
// flag's validator).
cli::Flag RowOf(const gflags::CommandLineFlagInfo& info) {
  cli::Flag flag;
  flag.name = info.name;
  flag.default_value = info.default_value;
  flag.help = info.description.empty() ? " " : info.description;  // listed even without help
  flag.value_name = ValueName(info.type);
  flag.expected = ExpectedValue(info.type);
  if (info.type == "bool") {
    flag.type = cli::FlagType::kSwitch;
  } else if (info.type == "double") {
    flag.type = cli::FlagType::kNumber;
  } else if (info.type != "string") {
    flag.type = cli::FlagType::kInteger;
    if (info.type == "int32") flag.min = INT32_MIN, flag.max = INT32_MAX;
    if (info.type == "uint32") flag.min = 0, flag.max = UINT32_MAX;
    if (info.type == "uint64") flag.min = 0;
  }
  const std::string expected =
      flag.expected + (info.has_validator_fn ? " that its check accepts" : "");
  flag.on_set = [name = info.name, expected](const std::string& value) {
    if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
      throw cli::UsageError(BadValueMessage(name, value, expected));
    }
  };
  return flag;
}

}  // namespace

void Parse(int* argc, char*** argv, std::string_view usage_line, std::string_view description) {
  const std::string program_name = ProgramName(*argc > 0 ? (*argv)[0] : nullptr);
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);
  std::vector<cli::Flag> rows;
  for (const gflags::CommandLineFlagInfo& info : all) {
    if (IsOwnFlag(info.filename)) rows.push_back(RowOf(info));
  }
  std::sort(rows.begin(), rows.end(),
            [](const cli::Flag& a, const cli::Flag& b) { return a.name < b.name; });
  cli::Program program;
  program.name = program_name;
  program.usage_line = usage_line;
  program.description = description;
  program.positional = cli::Program::Positional::kAnywhere;
  // glog's and gflags' own flags (--v, --logtostderr) work, unlisted.
  program.accept_other = [](const std::string& name, bool* is_switch) {
    gflags::CommandLineFlagInfo info;
    if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info)) return false;
    *is_switch = info.type == "bool";
    return true;
  };
  program.set_other = [](const std::string& name, const std::string& value) {
    gflags::CommandLineFlagInfo info;
    gflags::GetCommandLineFlagInfo(name.c_str(), &info);
    if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
      throw cli::UsageError(BadValueMessage(name, value, ExpectedValue(info.type)));
    }
  };
  cli::CommandLine line(std::move(program), std::move(rows));
  try {
    if (!line.ParseArgv(*argc, *argv)) {
      std::fputs(line.Usage().c_str(), stdout);
      std::exit(0);
    }
  } catch (const cli::UsageError& error) {
    Refuse(program_name, error.what());
  }
  // gflags keeps argv for its own reports (gflags::GetArgv).
  gflags::SetArgv(*argc, const_cast<const char**>(*argv));
  std::vector<char*> kept;
  if (*argc > 0) kept.push_back((*argv)[0]);
  // The positional words, in order, are argv's own strings.
  size_t next = 0;
  for (int index = 1; index < *argc && next < line.positional().size(); ++index) {
    if (line.positional()[next] == (*argv)[index]) {
      kept.push_back((*argv)[index]);
      ++next;
    }
  }
  for (size_t i = 0; i < kept.size(); ++i) (*argv)[i] = kept[i];
  *argc = static_cast<int>(kept.size());
  (*argv)[*argc] = nullptr;
}

}  // namespace infini::flags
