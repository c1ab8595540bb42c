// Loading one backend by its name, path or TRANSPORT+DEVICE pair, shared by
// Backend::Load and DeviceBackends::Load (whose entries are each one).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "infini/ccl/ccl.h"

namespace infini::ccl::internal {

// `spec`: a name, a path, or TRANSPORT+DEVICE (staged_backend.h). With
// `apply_device_backend`, a name or path is staged through this rank's
// INFINI_CCL_DEVICE_BACKEND when one is set (a list's entries say so
// themselves, with +). Throws LoadError naming `source`='`whole`'.
std::shared_ptr<const Backend> LoadNamed(std::string_view spec,
                                         std::span<const VendorOption> options,
                                         const std::string& source, std::string_view whole,
                                         bool apply_device_backend);

}  // namespace infini::ccl::internal
