// The one wording of a refused call whose optional plugin entry is NULL.
#pragma once

#include <string>
#include <string_view>

#include "infini/ccl/error.h"

namespace infini::ccl::internal {

[[noreturn]] inline void RefuseMissingEntry(std::string_view backend, std::string_view entry) {
  throw Error(infiniCclUnsupported, "backend '" + std::string(backend) + "' does not implement " +
                                        std::string(entry) + " (an optional entry of its plugin)");
}

}  // namespace infini::ccl::internal
