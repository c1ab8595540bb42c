#include "host_values.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace infini::gloo_test {
namespace {

// fp16 bits of a small integer (|value| <= 2048, exact).
uint16_t Float16BitsOfInteger(double value) {
  if (value == 0) return 0;
  const uint16_t sign = value < 0 ? 0x8000 : 0;
  auto magnitude = static_cast<uint32_t>(std::fabs(value));
  int exponent = 31 - std::countl_zero(magnitude);  // floor(log2)
  const uint32_t mantissa = (magnitude << (10 - exponent)) & 0x3ffu;
  return static_cast<uint16_t>(sign | ((exponent + 15) << 10) | mantissa);
}

double Float16Value(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return (bits & 0x8000) ? -magnitude : magnitude;
}

template <class T>
void Put(std::vector<unsigned char>& bytes, size_t index, T value) {
  std::memcpy(bytes.data() + index * sizeof(T), &value, sizeof(T));
}

template <class T>
T Take(const std::vector<unsigned char>& bytes, size_t index) {
  T value;
  std::memcpy(&value, bytes.data() + index * sizeof(T), sizeof(T));
  return value;
}

}  // namespace

const std::vector<TestType>& AllTestTypes() {
  namespace dt = ccl::dtype;
  static const std::vector<TestType> types = {
      {dt::kInt8, "int8", false, true},      {dt::kUInt8, "uint8", false, false},
      {dt::kInt32, "int32", false, true},    {dt::kUInt32, "uint32", false, false},
      {dt::kInt64, "int64", false, true},    {dt::kUInt64, "uint64", false, false},
      {dt::kFloat16, "float16", true, true}, {dt::kBFloat16, "bfloat16", true, true},
      {dt::kFloat32, "float32", true, true}, {dt::kFloat64, "float64", true, true},
  };
  return types;
}

const std::vector<ccl::ReduceOp>& AllReduceOps() {
  static const std::vector<ccl::ReduceOp> ops = {ccl::ReduceOp::kSum, ccl::ReduceOp::kProd,
                                                 ccl::ReduceOp::kMax, ccl::ReduceOp::kMin,
                                                 ccl::ReduceOp::kAvg};
  return ops;
}

HostValues::HostValues(const TestType& type, size_t count)
    : type_(type), count_(count), bytes_(count * ccl::ElementBytes(type.dtype)) {}

void HostValues::Set(size_t index, double value) {
  const DLDataType dtype = type_.dtype;
  if (dtype.code == kDLFloat && dtype.bits == 16) {
    Put<uint16_t>(bytes_, index, Float16BitsOfInteger(value));
  } else if (dtype.code == kDLBfloat) {
    Put<uint16_t>(bytes_, index,
                  static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(value)) >> 16));
  } else if (dtype.code == kDLFloat && dtype.bits == 32) {
    Put<float>(bytes_, index, static_cast<float>(value));
  } else if (dtype.code == kDLFloat) {
    Put<double>(bytes_, index, value);
  } else {
    const auto integer = static_cast<int64_t>(value);
    switch (dtype.bits) {
      case 8:
        Put<uint8_t>(bytes_, index, static_cast<uint8_t>(integer));
        break;
      case 32:
        Put<uint32_t>(bytes_, index, static_cast<uint32_t>(integer));
        break;
      default:
        Put<uint64_t>(bytes_, index, static_cast<uint64_t>(integer));
        break;
    }
  }
}

double HostValues::Get(size_t index) const {
  const DLDataType dtype = type_.dtype;
  if (dtype.code == kDLFloat && dtype.bits == 16)
    return Float16Value(Take<uint16_t>(bytes_, index));
  if (dtype.code == kDLBfloat) {
    return std::bit_cast<float>(static_cast<uint32_t>(Take<uint16_t>(bytes_, index)) << 16);
  }
  if (dtype.code == kDLFloat && dtype.bits == 32) return Take<float>(bytes_, index);
  if (dtype.code == kDLFloat) return Take<double>(bytes_, index);
  if (type_.is_signed) {
    switch (dtype.bits) {
      case 8:
        return Take<int8_t>(bytes_, index);
      case 32:
        return Take<int32_t>(bytes_, index);
      default:
        return static_cast<double>(Take<int64_t>(bytes_, index));
    }
  }
  switch (dtype.bits) {
    case 8:
      return Take<uint8_t>(bytes_, index);
    case 32:
      return Take<uint32_t>(bytes_, index);
    default:
      return static_cast<double>(Take<uint64_t>(bytes_, index));
  }
}

double InputValue(const TestType& type, ccl::ReduceOp op, int rank, size_t index) {
  const auto i = static_cast<int>(index % 97);
  switch (op) {
    case ccl::ReduceOp::kProd:
      // At most two ranks of eight contribute a 2: products stay <= 4.
      return (rank + i) % 4 == 0 ? 2 : 1;
    case ccl::ReduceOp::kMax:
    case ccl::ReduceOp::kMin: {
      const int spread = (rank * 7 + i * 3) % 11;
      return type.is_signed ? spread - 5 : spread;
    }
    default: {
      // sum/avg: up to 8 ranks × 12 stays within int8 and exact in bf16.
      const int value = (rank + 1 + i % 5) % 13;
      return type.is_signed && (rank + i) % 3 == 0 ? -value : value;
    }
  }
}

double ReferenceValue(const TestType& type, ccl::ReduceOp op, int world_size, size_t index) {
  double result = InputValue(type, op, 0, index);
  for (int rank = 1; rank < world_size; ++rank) {
    const double value = InputValue(type, op, rank, index);
    switch (op) {
      case ccl::ReduceOp::kProd:
        result *= value;
        break;
      case ccl::ReduceOp::kMax:
        result = std::max(result, value);
        break;
      case ccl::ReduceOp::kMin:
        result = std::min(result, value);
        break;
      default:
        result += value;
        break;
    }
  }
  if (op == ccl::ReduceOp::kAvg) {
    result = type.is_float ? result / world_size : std::trunc(result / world_size);
  }
  return result;
}

bool CloseEnough(const TestType& type, double got, double want) {
  if (!type.is_float) return got == want;
  double relative = 1e-12;
  if (type.dtype.bits == 16) relative = type.dtype.code == kDLBfloat ? 1.0 / 128 : 1.0 / 1024;
  if (type.dtype.bits == 32) relative = 1e-6;
  return std::fabs(got - want) <= relative * std::max(1.0, std::fabs(want));
}

}  // namespace infini::gloo_test
