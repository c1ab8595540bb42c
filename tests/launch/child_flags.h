// The test children's own flags and variables (join_check_child,
// store_load_child): "--name=value" from argv, and a variable or "".
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

namespace infini::launch::testing {

inline std::string Flag(int argc, char** argv, const std::string& name,
                        const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

inline std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

}  // namespace infini::launch::testing
