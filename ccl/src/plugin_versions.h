// The plugin ABI versions this host reads, newest first (NCCL's loader
// walking {version, loader}): one reader per version, in a file of its own,
// checks the exported table and gives the host the current table (for an
// older version, through that version's adapter). A new version is a new
// row, a new reader and adapters for the older ones; nothing else in the
// host names a version.
#pragma once

#include <cstdint>
#include <string>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::internal {

// Each throws LoadError naming `library_path` when the table is not usable.
const infiniCclPlugin_t* ReadV2Table(const void* symbol, const std::string& library_path);
const infiniCclPlugin_t* ReadV1Table(const void* symbol, const std::string& library_path);

struct PluginVersion {
  uint32_t version;
  const char* symbol;
  const infiniCclPlugin_t* (*read)(const void* symbol, const std::string& library_path);
};

inline constexpr PluginVersion kPluginVersions[] = {
    {INFINI_CCL_PLUGIN_ABI_VERSION_V2, INFINI_CCL_PLUGIN_SYMBOL_V2, &ReadV2Table},
    {INFINI_CCL_PLUGIN_ABI_VERSION_V1, INFINI_CCL_PLUGIN_SYMBOL_V1, &ReadV1Table},
};

}  // namespace infini::ccl::internal
