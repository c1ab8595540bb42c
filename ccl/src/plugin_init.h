// The plugin's optional process-wide init entry: called once, right after
// its table is accepted and before any other entry.
#pragma once

#include <span>
#include <string>

#include "infini/ccl/ccl.h"

namespace infini::ccl::internal {

// Calls plugin.init (when the plugin has one) with the options meant for
// this plugin: `options` from the program, then INFINI_CCL_VENDOR_OPTIONS
// ("BACKEND:KEY=VALUE;..."); and the process's place in the run from the
// launcher's environment. Throws LoadError naming the plugin (or the
// variable, for a malformed entry).
void InitPlugin(const infiniCclPlugin_t& plugin, const std::string& library_path,
                std::span<const VendorOption> options);

// INFINI_CCL_VENDOR_OPTIONS parsed; LoadError names the bad entry.
std::vector<VendorOption> VendorOptionsFromEnvironment();

}  // namespace infini::ccl::internal
