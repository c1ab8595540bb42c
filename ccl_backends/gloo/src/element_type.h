// gloo's option objects are templated on the element type only to learn its
// size; an opaque element of the right width lets one code path serve every
// dtype.
#pragma once

#include <cstddef>

#include "errors.h"

namespace infini::gloo_backend {

template <size_t Bytes>
struct OpaqueElement {
  unsigned char bytes[Bytes];
};

// Calls `visit.template operator()<OpaqueElement<element_bytes>>()`.
template <class Visitor>
auto WithOpaqueElement(size_t element_bytes, Visitor&& visit) {
  switch (element_bytes) {
    case 1:
      return visit.template operator()<OpaqueElement<1>>();
    case 2:
      return visit.template operator()<OpaqueElement<2>>();
    case 4:
      return visit.template operator()<OpaqueElement<4>>();
    case 8:
      return visit.template operator()<OpaqueElement<8>>();
    default:
      throw PluginError(infiniCclInternalError,
                        "no opaque element of " + std::to_string(element_bytes) + " bytes");
  }
}

}  // namespace infini::gloo_backend
