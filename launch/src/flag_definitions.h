// infini_run's flags (flag_definitions.cc): what the parser accepts and
// --help lists.
#pragma once

#include <span>

namespace infini::launch {

// Every value flag is text: the parser checks it and names the flag, the
// value and what was expected.
struct FlagDefinition {
  const char* name;
  bool is_bool;
  const char* default_value;  // "true"/"false" for a switch
  const char* help;
};

// In the order --help lists them.
std::span<const FlagDefinition> LaunchFlags();

}  // namespace infini::launch
