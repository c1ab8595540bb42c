// Whether a dlpack type is one scalar type: shared by the reference's files.
#pragma once

#include <dlpack/dlpack.h>

namespace infini::conformance {

inline bool Is(DLDataType dtype, int code, int bits) {
  return dtype.code == code && dtype.bits == bits && dtype.lanes == 1;
}

}  // namespace infini::conformance
