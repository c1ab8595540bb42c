// Finding, opening and validating a backend plugin library.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::internal {

struct LoadedPlugin {
  const infiniCclPlugin_v1_t* plugin = nullptr;
  std::string library_path;
};

// "gloo" → "libinfini_ccl_gloo.so".
std::string PluginFileName(std::string_view backend_name);

// Directories searched for a plugin by name, in order: each entry of
// INFINI_CCL_PLUGIN_PATH, ../lib beside the running executable, and the
// directory of libinfini_ccl itself. (The system search path comes last.)
std::vector<std::string> PluginSearchDirectories();

// Opens the plugin named `backend_name` (searched as above) or at `path`
// (contains '/'), and validates its entry table. Throws LoadError with one
// line that names everything tried and why each failed.
LoadedPlugin OpenPlugin(std::string_view name_or_path);

// Checks the entry table of an opened library; throws LoadError.
void ValidatePluginTable(const infiniCclPlugin_v1_t& plugin, const std::string& library_path);

}  // namespace infini::ccl::internal
