#include "host_values.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::nccl_test {
namespace {

// IEEE-like binary format with `exponent_bits`, `mantissa_bits`.
struct SmallFloat {
  int exponent_bits;
  int mantissa_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
};

constexpr SmallFloat kHalf{5, 10};
constexpr SmallFloat kBFloat16{8, 7};
constexpr SmallFloat kE4M3{4, 3};
constexpr SmallFloat kE5M2{5, 2};

uint32_t EncodeSmallFloat(SmallFloat format, double value) {
  const uint32_t sign = std::signbit(value) ? 1u : 0u;
  const double magnitude = std::fabs(value);
  const uint32_t sign_bit = sign << (format.exponent_bits + format.mantissa_bits);
  if (magnitude == 0) return sign_bit;
  int exponent = 0;
  const double fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent
  int field = exponent - 1 + format.bias();
  uint32_t mantissa = 0;
  if (field <= 0) {  // subnormal
    mantissa = static_cast<uint32_t>(
        std::nearbyint(std::ldexp(magnitude, format.bias() - 1 + format.mantissa_bits)));
    field = 0;
  } else {
    mantissa =
        static_cast<uint32_t>(std::nearbyint(std::ldexp(2 * fraction - 1, format.mantissa_bits)));
    if (mantissa == (1u << format.mantissa_bits)) {
      mantissa = 0;
      ++field;
    }
  }
  return sign_bit | (static_cast<uint32_t>(field) << format.mantissa_bits) | mantissa;
}

double DecodeSmallFloat(SmallFloat format, uint32_t bits) {
  const uint32_t mantissa = bits & ((1u << format.mantissa_bits) - 1);
  const int field =
      static_cast<int>((bits >> format.mantissa_bits) & ((1u << format.exponent_bits) - 1));
  const bool negative = (bits >> (format.exponent_bits + format.mantissa_bits)) & 1u;
  double magnitude = 0;
  if (field == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - format.bias() - format.mantissa_bits);
  } else {
    magnitude = std::ldexp(1.0 + std::ldexp(static_cast<double>(mantissa), -format.mantissa_bits),
                           field - format.bias());
  }
  return negative ? -magnitude : magnitude;
}

template <typename T>
void Store(T value, void* element) {
  std::memcpy(element, &value, sizeof(T));
}
template <typename T>
T Load(const void* element) {
  T value;
  std::memcpy(&value, element, sizeof(T));
  return value;
}

bool Is(DLDataType dtype, int code, int bits) {
  return dtype.code == code && dtype.bits == bits && dtype.lanes == 1;
}

[[noreturn]] void Unknown(DLDataType dtype) {
  throw std::invalid_argument("host_values: no host encoding for dtype code " +
                              std::to_string(dtype.code) + " bits " + std::to_string(dtype.bits));
}

}  // namespace

const std::vector<TypeCase>& ReducibleTypes() {
  static const std::vector<TypeCase> types = {
      {{kDLInt, 8, 1}, "int8", 0, true},
      {{kDLUInt, 8, 1}, "uint8", 0, true},
      {{kDLInt, 32, 1}, "int32", 0, true},
      {{kDLUInt, 32, 1}, "uint32", 0, true},
      {{kDLInt, 64, 1}, "int64", 0, true},
      {{kDLUInt, 64, 1}, "uint64", 0, true},
      {{kDLFloat, 16, 1}, "float16", 2e-3, false},
      {{kDLBfloat, 16, 1}, "bfloat16", 2e-2, false},
      {{kDLFloat, 32, 1}, "float32", 1e-5, false},
      {{kDLFloat, 64, 1}, "float64", 1e-9, false},
      {{INFINI_CCL_DL_FLOAT8_E4M3FN, 8, 1}, "float8_e4m3fn", 0.13, false},
      {{INFINI_CCL_DL_FLOAT8_E5M2, 8, 1}, "float8_e5m2", 0.26, false},
  };
  return types;
}

TypeCase BoolCase() { return {{INFINI_CCL_DL_BOOL, 8, 1}, "bool", 0, true}; }

size_t ElementBytes(DLDataType dtype) { return static_cast<size_t>(dtype.bits) * dtype.lanes / 8; }

void Encode(DLDataType dtype, double value, void* element) {
  const auto integer = static_cast<int64_t>(value);
  if (Is(dtype, INFINI_CCL_DL_BOOL, 8)) return Store(static_cast<uint8_t>(value != 0), element);
  if (Is(dtype, kDLInt, 8)) return Store(static_cast<int8_t>(integer), element);
  if (Is(dtype, kDLUInt, 8)) return Store(static_cast<uint8_t>(integer), element);
  if (Is(dtype, kDLInt, 16)) return Store(static_cast<int16_t>(integer), element);
  if (Is(dtype, kDLInt, 32)) return Store(static_cast<int32_t>(integer), element);
  if (Is(dtype, kDLUInt, 32)) return Store(static_cast<uint32_t>(integer), element);
  if (Is(dtype, kDLInt, 64)) return Store(integer, element);
  if (Is(dtype, kDLUInt, 64)) return Store(static_cast<uint64_t>(integer), element);
  if (Is(dtype, kDLFloat, 32)) return Store(static_cast<float>(value), element);
  if (Is(dtype, kDLFloat, 64)) return Store(value, element);
  if (Is(dtype, kDLFloat, 16)) {
    return Store(static_cast<uint16_t>(EncodeSmallFloat(kHalf, value)), element);
  }
  if (Is(dtype, kDLBfloat, 16)) {
    return Store(static_cast<uint16_t>(EncodeSmallFloat(kBFloat16, value)), element);
  }
  if (Is(dtype, INFINI_CCL_DL_FLOAT8_E4M3FN, 8)) {
    return Store(static_cast<uint8_t>(EncodeSmallFloat(kE4M3, value)), element);
  }
  if (Is(dtype, INFINI_CCL_DL_FLOAT8_E5M2, 8)) {
    return Store(static_cast<uint8_t>(EncodeSmallFloat(kE5M2, value)), element);
  }
  Unknown(dtype);
}

double Decode(DLDataType dtype, const void* element) {
  if (Is(dtype, INFINI_CCL_DL_BOOL, 8)) return Load<uint8_t>(element);
  if (Is(dtype, kDLInt, 8)) return Load<int8_t>(element);
  if (Is(dtype, kDLUInt, 8)) return Load<uint8_t>(element);
  if (Is(dtype, kDLInt, 16)) return Load<int16_t>(element);
  if (Is(dtype, kDLInt, 32)) return Load<int32_t>(element);
  if (Is(dtype, kDLUInt, 32)) return Load<uint32_t>(element);
  if (Is(dtype, kDLInt, 64)) return static_cast<double>(Load<int64_t>(element));
  if (Is(dtype, kDLUInt, 64)) return static_cast<double>(Load<uint64_t>(element));
  if (Is(dtype, kDLFloat, 32)) return Load<float>(element);
  if (Is(dtype, kDLFloat, 64)) return Load<double>(element);
  if (Is(dtype, kDLFloat, 16)) return DecodeSmallFloat(kHalf, Load<uint16_t>(element));
  if (Is(dtype, kDLBfloat, 16)) return DecodeSmallFloat(kBFloat16, Load<uint16_t>(element));
  if (Is(dtype, INFINI_CCL_DL_FLOAT8_E4M3FN, 8)) {
    return DecodeSmallFloat(kE4M3, Load<uint8_t>(element));
  }
  if (Is(dtype, INFINI_CCL_DL_FLOAT8_E5M2, 8)) {
    return DecodeSmallFloat(kE5M2, Load<uint8_t>(element));
  }
  Unknown(dtype);
}

HostArray::HostArray(DLDataType dtype, size_t count)
    : dtype_(dtype), width_(ElementBytes(dtype)), bytes_(count * ElementBytes(dtype)) {}

}  // namespace infini::ccl::nccl_test
