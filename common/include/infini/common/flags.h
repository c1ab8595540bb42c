// The one way a gflags program of the project takes its flags
// (target infini_common_flags; the format is infini/common/usage.h's).
//
//   int main(int argc, char** argv) {
//     infini::flags::Parse(&argc, &argv, "ccl_info [--ccl_backend=NAME] [--capabilities]",
//                          "Loads a backend plugin and prints what it is.");
//
// instead of gflags::ParseCommandLineFlags(&argc, &argv, true), whose --help
// lists gflags' own flags under the build machine's paths and whose errors
// exit 1 in gflags' words.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "infini/common/usage.h"

namespace infini::flags {

// Sets the flags of argv (--name=value, --name value, --name and --noname
// for booleans, one or two dashes; `--` ends the flags) and leaves in argv
// only argv[0] and the other arguments, in order. --help (-h, --helpfull)
// prints FormatUsage(usage_line, description, OwnFlags()) on stdout and
// exits 0. An unknown flag, a missing or bad value prints one line on
// stderr, "<program>: unknown flag '--x' (see <program> --help)" or
// "<program>: --flag='v': expected <type>", and exits 2. glog's flags are
// accepted, not listed.
void Parse(int* argc, char*** argv, std::string_view usage_line, std::string_view description = {});

// The flags this program defines (in the project's own source files, not
// gflags' or glog's), sorted by name, as --help shows them.
std::vector<FlagHelp> OwnFlags();

// What a value of a gflags type must look like ("a 32-bit integer").
std::string ExpectedValue(std::string_view gflags_type);

}  // namespace infini::flags
