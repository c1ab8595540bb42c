// Finding, opening and validating a backend plugin library.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::internal {

struct LoadedPlugin {
  // The newest table; for an older plugin, its adapter's. Never freed:
  // plugins stay loaded for the life of the process.
  const infiniCclPlugin_t* plugin = nullptr;
  uint32_t abi_version = 0;  // the version the library itself implements
  std::string library_path;
  // Its infiniCclProfiler_v1, when it exports one (plugin_profiler_v1.h).
  const void* profiler_v1 = nullptr;
};

// "gloo" → "libinfini_ccl_gloo.so".
std::string PluginFileName(std::string_view backend_name);

// Directories searched for a plugin by name, in order: each entry of
// INFINI_CCL_PLUGIN_PATH, ../lib beside the running executable, and the
// directory of libinfini_ccl itself. (The system search path comes last.)
std::vector<std::string> PluginSearchDirectories();

// Names of the plugins installed in the search directories
// (libinfini_ccl_NAME.so → NAME), without duplicates, sorted; nccl first,
// being the accelerator most machines have.
std::vector<std::string> InstalledBackendNames();

// Opens the plugin named `backend_name` (searched as above) or at `path`
// (contains '/'), and validates its entry table. Throws LoadError with one
// line that names everything tried and why each failed.
LoadedPlugin OpenPlugin(std::string_view name_or_path);

}  // namespace infini::ccl::internal
