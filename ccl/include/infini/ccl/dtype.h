// dlpack data types and tensors as the C++ API sees them.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace infini::ccl {

namespace dtype {
inline constexpr DLDataType kInt8{kDLInt, 8, 1};
inline constexpr DLDataType kUInt8{kDLUInt, 8, 1};
inline constexpr DLDataType kInt16{kDLInt, 16, 1};
inline constexpr DLDataType kUInt16{kDLUInt, 16, 1};
inline constexpr DLDataType kInt32{kDLInt, 32, 1};
inline constexpr DLDataType kUInt32{kDLUInt, 32, 1};
inline constexpr DLDataType kInt64{kDLInt, 64, 1};
inline constexpr DLDataType kUInt64{kDLUInt, 64, 1};
inline constexpr DLDataType kFloat16{kDLFloat, 16, 1};
inline constexpr DLDataType kBFloat16{kDLBfloat, 16, 1};
inline constexpr DLDataType kFloat32{kDLFloat, 32, 1};
inline constexpr DLDataType kFloat64{kDLFloat, 64, 1};
}  // namespace dtype

inline bool operator==(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}
inline bool operator!=(DLDataType a, DLDataType b) { return !(a == b); }

// Bytes of one element (bits × lanes rounded up to bytes).
size_t ElementBytes(DLDataType dtype);
// "float32", "bfloat16", "int8", or "dtype(code=C,bits=B,lanes=L)".
std::string DataTypeName(DLDataType dtype);
// Inverse of DataTypeName for the named types; throws std::invalid_argument.
DLDataType ParseDataType(std::string_view name);
// "cpu:0", "cuda:3".
std::string DeviceName(DLDevice device);

// Number of elements of a tensor (product of its shape; 1 for a scalar).
int64_t NumElements(const DLTensor& tensor);
// True when the tensor is dense in row-major order (strides NULL or equal to
// the compact strides; dimensions of extent 1 may have any stride).
bool IsContiguous(const DLTensor& tensor);
// Address of the first element (data + byte_offset).
void* DataPointer(const DLTensor& tensor);

// A contiguous 1-D DLTensor that owns its shape (a DLTensor only points at
// one): what tests, benchmarks and simple callers pass to collectives.
class FlatTensor {
 public:
  FlatTensor(void* data, DLDataType dtype, int64_t count, DLDevice device);
  FlatTensor(const FlatTensor& other);
  FlatTensor& operator=(const FlatTensor& other);

  const DLTensor& dl() const { return tensor_; }
  operator const DLTensor&() const { return tensor_; }  // NOLINT: meant to convert
  int64_t count() const { return shape_[0]; }

 private:
  int64_t shape_[1];
  DLTensor tensor_;
};

}  // namespace infini::ccl
