#include "infini/ccl/dtype.h"

#include <array>
#include <stdexcept>
#include <string>

#include "infini/ccl/capabilities.h"
#include "infini/ccl/device_backends.h"
#include "infini/ccl/plugin_abi.h"
#include "infini/common/one_line.h"

namespace infini::ccl {
namespace {

struct NamedType {
  std::string_view name;
  DLDataType dtype;
};

constexpr std::array<NamedType, 15> kNamedTypes{{
    {"int8", dtype::kInt8},
    {"uint8", dtype::kUInt8},
    {"int16", dtype::kInt16},
    {"uint16", dtype::kUInt16},
    {"int32", dtype::kInt32},
    {"uint32", dtype::kUInt32},
    {"int64", dtype::kInt64},
    {"uint64", dtype::kUInt64},
    {"float16", dtype::kFloat16},
    {"bfloat16", dtype::kBFloat16},
    {"float32", dtype::kFloat32},
    {"float64", dtype::kFloat64},
    {"float8_e4m3fn", DLDataType{INFINI_CCL_DL_FLOAT8_E4M3FN, 8, 1}},
    {"float8_e5m2", DLDataType{INFINI_CCL_DL_FLOAT8_E5M2, 8, 1}},
    {"bool", DLDataType{INFINI_CCL_DL_BOOL, 8, 1}},
}};

// Common spellings users type on command lines.
constexpr std::array<std::pair<std::string_view, std::string_view>, 8> kAliases{{
    {"fp16", "float16"},
    {"half", "float16"},
    {"bf16", "bfloat16"},
    {"fp32", "float32"},
    {"float", "float32"},
    {"fp64", "float64"},
    {"double", "float64"},
    {"int", "int32"},
}};

}  // namespace

size_t ElementBytes(DLDataType dtype) {
  return (static_cast<size_t>(dtype.bits) * dtype.lanes + 7) / 8;
}

std::string DataTypeName(DLDataType dtype) {
  for (const auto& named : kNamedTypes) {
    if (named.dtype == dtype) return std::string(named.name);
  }
  return "dtype(code=" + std::to_string(dtype.code) + ",bits=" + std::to_string(dtype.bits) +
         ",lanes=" + std::to_string(dtype.lanes) + ")";
}

DLDataType ParseDataType(std::string_view name) {
  for (const auto& [alias, canonical] : kAliases) {
    if (name == alias) name = canonical;
  }
  for (const auto& named : kNamedTypes) {
    if (named.name == name) return named.dtype;
  }
  std::string known;
  for (const auto& named : kNamedTypes)
    known += (known.empty() ? "" : ", ") + std::string(named.name);
  throw std::invalid_argument("unknown data type '" + OneLine(name) + "': expected one of " +
                              known);
}

std::string DeviceName(DLDevice device) {
  return DeviceTypeName(device.device_type) + ":" + std::to_string(device.device_id);
}

int64_t NumElements(const DLTensor& tensor) {
  int64_t count = 1;
  for (int i = 0; i < tensor.ndim; ++i) count *= tensor.shape[i];
  return count;
}

bool IsContiguous(const DLTensor& tensor) {
  if (tensor.strides == nullptr) return true;
  int64_t expected_stride = 1;
  for (int i = tensor.ndim - 1; i >= 0; --i) {
    if (tensor.shape[i] != 1 && tensor.strides[i] != expected_stride) return false;
    expected_stride *= tensor.shape[i];
  }
  return true;
}

void* DataPointer(const DLTensor& tensor) {
  return static_cast<char*>(tensor.data) + tensor.byte_offset;
}

FlatTensor::FlatTensor(void* data, DLDataType dtype, int64_t count, DLDevice device)
    : shape_{count} {
  tensor_ = DLTensor{};
  tensor_.data = data;
  tensor_.device = device;
  tensor_.ndim = 1;
  tensor_.dtype = dtype;
  tensor_.shape = shape_;
  tensor_.strides = nullptr;
  tensor_.byte_offset = 0;
}

FlatTensor::FlatTensor(const FlatTensor& other) : shape_{other.shape_[0]}, tensor_(other.tensor_) {
  tensor_.shape = shape_;
}

FlatTensor& FlatTensor::operator=(const FlatTensor& other) {
  shape_[0] = other.shape_[0];
  tensor_ = other.tensor_;
  tensor_.shape = shape_;
  return *this;
}

int KnownDataTypeIndex(DLDataType dtype) {
  for (size_t i = 0; i < kNamedTypes.size(); ++i) {
    if (kNamedTypes[i].dtype == dtype) return static_cast<int>(i);
  }
  return -1;
}

DLDataType KnownDataType(int index) { return kNamedTypes.at(static_cast<size_t>(index)).dtype; }

static_assert(kNamedTypes.size() == kNumKnownDataTypes,
              "capabilities.h counts the named types of dtype.cc");

}  // namespace infini::ccl
