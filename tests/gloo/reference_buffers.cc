#include "reference_buffers.h"

#include <gtest/gtest.h>

namespace infini::gloo_test {

const std::vector<DLDataType>& ReducibleTypes() {
  namespace dt = ccl::dtype;
  static const std::vector<DLDataType> types = {
      dt::kInt8,   dt::kUInt8,   dt::kInt32,    dt::kUInt32,  dt::kInt64,
      dt::kUInt64, dt::kFloat16, dt::kBFloat16, dt::kFloat32, dt::kFloat64,
  };
  return types;
}

ccl::DeviceBuffer Upload(const ccl::Communicator& comm, DLDataType dtype,
                         std::span<const double> values) {
  const std::vector<unsigned char> bytes = reference::Encode(dtype, values);
  ccl::DeviceBuffer buffer(comm.backend(), bytes.size());
  if (!bytes.empty()) buffer.CopyFromHost(bytes.data(), bytes.size());
  return buffer;
}

std::vector<double> Download(const ccl::DeviceBuffer& buffer, DLDataType dtype, size_t count,
                             size_t first) {
  const size_t width = ccl::ElementBytes(dtype);
  std::vector<unsigned char> bytes(count * width);
  if (!bytes.empty()) buffer.CopyToHost(bytes.data(), bytes.size(), first * width);
  return reference::Decode(dtype, bytes.data(), count);
}

void ExpectMatches(DLDataType dtype, reference::Purpose purpose, int world_size,
                   std::span<const double> expected, std::span<const double> actual,
                   const std::string& what) {
  const reference::Comparison comparison =
      reference::Compare(dtype, purpose, world_size, expected, actual);
  if (!comparison.ok()) ADD_FAILURE() << what << ": " << comparison.Describe();
}

}  // namespace infini::gloo_test
