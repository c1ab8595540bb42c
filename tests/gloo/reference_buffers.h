// The gloo tests' bridge to the shared host reference
// (infini/conformance/reference.h): which types gloo reduces, device buffers
// filled with reference values, and the comparison reported as a gtest
// failure.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/conformance/reference.h"

namespace infini::gloo_test {

namespace reference = infini::conformance;

// The types gloo reduces: every type of the C++ API but fp8 and bool, which
// it only moves. In ccl::KnownDataType order.
const std::vector<DLDataType>& ReducibleTypes();

// A device buffer of `comm`'s backend holding `values` encoded as `dtype`.
ccl::DeviceBuffer Upload(const ccl::Communicator& comm, DLDataType dtype,
                         std::span<const double> values);
// `count` elements of `buffer` from element `first`, decoded.
std::vector<double> Download(const ccl::DeviceBuffer& buffer, DLDataType dtype, size_t count,
                             size_t first = 0);

// Adds a gtest failure naming `what` and the first wrong element unless
// `actual` matches `expected` within the reference's tolerance for `purpose`
// (bit-exact for moved data).
void ExpectMatches(DLDataType dtype, reference::Purpose purpose, int world_size,
                   std::span<const double> expected, std::span<const double> actual,
                   const std::string& what);

}  // namespace infini::gloo_test
