// The host reference's element encodings: every type of the C++ API to and
// from double, narrow floats rounded to nearest even, and the sentinel no
// right result is (reference.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "infini/ccl/plugin_abi.h"
#include "infini/conformance/reference.h"
#include "type_match.h"

namespace infini::conformance {
namespace {

// A binary floating-point format narrower than float: float16, bfloat16 and
// the fp8 formats. e4m3fn has no infinity and one NaN pattern per sign.
struct NarrowFloat {
  int exponent_bits;
  int mantissa_bits;
  bool finite_only;  // e4m3fn
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int max_field() const { return (1 << exponent_bits) - 1; }
};

constexpr NarrowFloat kHalf{5, 10, false};
constexpr NarrowFloat kBfloat16{8, 7, false};
constexpr NarrowFloat kE4M3{4, 3, true};
constexpr NarrowFloat kE5M2{5, 2, false};

uint32_t EncodeNarrow(NarrowFloat format, double value) {
  const uint32_t sign = (std::signbit(value) ? 1u : 0u)
                        << (format.exponent_bits + format.mantissa_bits);
  const uint32_t all_mantissa = (1u << format.mantissa_bits) - 1;
  if (std::isnan(value)) {
    return sign | (static_cast<uint32_t>(format.max_field()) << format.mantissa_bits) |
           all_mantissa;
  }
  const double magnitude = std::fabs(value);
  if (magnitude == 0) return sign;
  int exponent = 0;
  const double fraction = std::frexp(magnitude, &exponent);  // in [0.5, 1)
  int field = exponent - 1 + format.bias();
  uint32_t mantissa = 0;
  if (field <= 0) {  // subnormal; nearbyint rounds to nearest even
    mantissa = static_cast<uint32_t>(
        std::nearbyint(std::ldexp(magnitude, format.bias() - 1 + format.mantissa_bits)));
    field = mantissa > all_mantissa ? 1 : 0;
    mantissa &= all_mantissa;
  } else {
    mantissa =
        static_cast<uint32_t>(std::nearbyint(std::ldexp(2 * fraction - 1, format.mantissa_bits)));
    if (mantissa > all_mantissa) {
      mantissa = 0;
      ++field;
    }
  }
  // Too large: infinity, or e4m3fn's largest finite value (448).
  const int largest_field = format.finite_only ? format.max_field() : format.max_field() - 1;
  const bool too_large = field > largest_field ||
                         (format.finite_only && field == largest_field && mantissa == all_mantissa);
  if (too_large) {
    if (format.finite_only) {
      return sign | (static_cast<uint32_t>(largest_field) << format.mantissa_bits) |
             (all_mantissa - 1);
    }
    return sign | (static_cast<uint32_t>(format.max_field()) << format.mantissa_bits);
  }
  return sign | (static_cast<uint32_t>(field) << format.mantissa_bits) | mantissa;
}

double DecodeNarrow(NarrowFloat format, uint32_t bits) {
  const uint32_t all_mantissa = (1u << format.mantissa_bits) - 1;
  const uint32_t mantissa = bits & all_mantissa;
  const int field =
      static_cast<int>((bits >> format.mantissa_bits) & static_cast<uint32_t>(format.max_field()));
  const bool negative = ((bits >> (format.exponent_bits + format.mantissa_bits)) & 1u) != 0;
  double magnitude = 0;
  if (format.finite_only && field == format.max_field() && mantissa == all_mantissa) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (!format.finite_only && field == format.max_field()) {
    magnitude = mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                              : std::numeric_limits<double>::infinity();
  } else if (field == 0) {
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

[[noreturn]] void Unknown(DLDataType dtype) {
  throw std::invalid_argument("host reference: no encoding for dtype " + ccl::DataTypeName(dtype));
}

}  // namespace

bool IsFloatingPoint(DLDataType dtype) {
  return dtype.code == kDLFloat || dtype.code == kDLBfloat ||
         dtype.code == INFINI_CCL_DL_FLOAT8_E4M3FN || dtype.code == INFINI_CCL_DL_FLOAT8_E5M2;
}

bool IsSigned(DLDataType dtype) { return dtype.code == kDLInt || IsFloatingPoint(dtype); }

bool IsBool(DLDataType dtype) { return dtype.code == INFINI_CCL_DL_BOOL; }

void EncodeElement(DLDataType dtype, double value, void* element) {
  if (IsFloatingPoint(dtype)) {
    if (Is(dtype, kDLFloat, 32)) return Store(static_cast<float>(value), element);
    if (Is(dtype, kDLFloat, 64)) return Store(value, element);
    if (Is(dtype, kDLFloat, 16)) {
      return Store(static_cast<uint16_t>(EncodeNarrow(kHalf, value)), element);
    }
    if (Is(dtype, kDLBfloat, 16)) {
      return Store(static_cast<uint16_t>(EncodeNarrow(kBfloat16, value)), element);
    }
    if (Is(dtype, INFINI_CCL_DL_FLOAT8_E4M3FN, 8)) {
      return Store(static_cast<uint8_t>(EncodeNarrow(kE4M3, value)), element);
    }
    if (Is(dtype, INFINI_CCL_DL_FLOAT8_E5M2, 8)) {
      return Store(static_cast<uint8_t>(EncodeNarrow(kE5M2, value)), element);
    }
    Unknown(dtype);
  }
  if (Is(dtype, INFINI_CCL_DL_BOOL, 8)) return Store(static_cast<uint8_t>(value != 0), element);
  const auto integer = static_cast<int64_t>(value);
  if (Is(dtype, kDLInt, 8)) return Store(static_cast<int8_t>(integer), element);
  if (Is(dtype, kDLUInt, 8)) return Store(static_cast<uint8_t>(integer), element);
  if (Is(dtype, kDLInt, 16)) return Store(static_cast<int16_t>(integer), element);
  if (Is(dtype, kDLUInt, 16)) return Store(static_cast<uint16_t>(integer), element);
  if (Is(dtype, kDLInt, 32)) return Store(static_cast<int32_t>(integer), element);
  if (Is(dtype, kDLUInt, 32)) return Store(static_cast<uint32_t>(integer), element);
  if (Is(dtype, kDLInt, 64)) return Store(integer, element);
  if (Is(dtype, kDLUInt, 64)) return Store(static_cast<uint64_t>(integer), element);
  Unknown(dtype);
}

double DecodeElement(DLDataType dtype, const void* element) {
  if (Is(dtype, kDLFloat, 32)) return Load<float>(element);
  if (Is(dtype, kDLFloat, 64)) return Load<double>(element);
  if (Is(dtype, kDLFloat, 16)) return DecodeNarrow(kHalf, Load<uint16_t>(element));
  if (Is(dtype, kDLBfloat, 16)) return DecodeNarrow(kBfloat16, Load<uint16_t>(element));
  if (Is(dtype, INFINI_CCL_DL_FLOAT8_E4M3FN, 8)) return DecodeNarrow(kE4M3, Load<uint8_t>(element));
  if (Is(dtype, INFINI_CCL_DL_FLOAT8_E5M2, 8)) return DecodeNarrow(kE5M2, Load<uint8_t>(element));
  // A bool is the byte 0 or 1 (as C++ and PyTorch store one); any other byte
  // decodes as itself, so a result or an unwritten sentinel never passes
  // for true.
  if (Is(dtype, INFINI_CCL_DL_BOOL, 8)) return Load<uint8_t>(element);
  if (Is(dtype, kDLInt, 8)) return Load<int8_t>(element);
  if (Is(dtype, kDLUInt, 8)) return Load<uint8_t>(element);
  if (Is(dtype, kDLInt, 16)) return Load<int16_t>(element);
  if (Is(dtype, kDLUInt, 16)) return Load<uint16_t>(element);
  if (Is(dtype, kDLInt, 32)) return Load<int32_t>(element);
  if (Is(dtype, kDLUInt, 32)) return Load<uint32_t>(element);
  if (Is(dtype, kDLInt, 64)) return static_cast<double>(Load<int64_t>(element));
  if (Is(dtype, kDLUInt, 64)) return static_cast<double>(Load<uint64_t>(element));
  Unknown(dtype);
}

namespace {

// Whole buffers of the common wide types without the per-element dispatch
// (a large case moves millions of elements); false for the other types.
template <typename T>
void EncodeAs(std::span<const double> values, unsigned char* bytes) {
  for (size_t index = 0; index < values.size(); ++index) {
    Store(static_cast<T>(values[index]), bytes + index * sizeof(T));
  }
}
template <typename T>
void DecodeAs(const unsigned char* bytes, std::vector<double>& values) {
  for (size_t index = 0; index < values.size(); ++index) {
    values[index] = static_cast<double>(Load<T>(bytes + index * sizeof(T)));
  }
}

bool EncodeFast(DLDataType dtype, std::span<const double> values, unsigned char* bytes) {
  if (Is(dtype, kDLFloat, 32)) return EncodeAs<float>(values, bytes), true;
  if (Is(dtype, kDLFloat, 64)) return EncodeAs<double>(values, bytes), true;
  if (Is(dtype, kDLInt, 32)) return EncodeAs<int32_t>(values, bytes), true;
  if (Is(dtype, kDLInt, 64)) return EncodeAs<int64_t>(values, bytes), true;
  return false;
}

bool DecodeFast(DLDataType dtype, const unsigned char* bytes, std::vector<double>& values) {
  if (Is(dtype, kDLFloat, 32)) return DecodeAs<float>(bytes, values), true;
  if (Is(dtype, kDLFloat, 64)) return DecodeAs<double>(bytes, values), true;
  if (Is(dtype, kDLInt, 32)) return DecodeAs<int32_t>(bytes, values), true;
  if (Is(dtype, kDLInt, 64)) return DecodeAs<int64_t>(bytes, values), true;
  if (Is(dtype, kDLBfloat, 16)) {  // the top half of a float32
    for (size_t index = 0; index < values.size(); ++index) {
      const uint32_t bits = static_cast<uint32_t>(Load<uint16_t>(bytes + index * 2)) << 16;
      values[index] = static_cast<double>(std::bit_cast<float>(bits));
    }
    return true;
  }
  return false;
}

}  // namespace

std::vector<unsigned char> Encode(DLDataType dtype, std::span<const double> values) {
  const size_t width = ccl::ElementBytes(dtype);
  std::vector<unsigned char> bytes(values.size() * width);
  if (EncodeFast(dtype, values, bytes.data())) return bytes;
  for (size_t index = 0; index < values.size(); ++index) {
    EncodeElement(dtype, values[index], bytes.data() + index * width);
  }
  return bytes;
}

std::vector<double> Decode(DLDataType dtype, const void* data, size_t count) {
  const size_t width = ccl::ElementBytes(dtype);
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::vector<double> values(count);
  if (DecodeFast(dtype, bytes, values)) return values;
  for (size_t index = 0; index < count; ++index) {
    values[index] = DecodeElement(dtype, bytes + index * width);
  }
  return values;
}

double RoundTo(DLDataType dtype, double value) {
  unsigned char element[8];
  EncodeElement(dtype, value, element);
  return DecodeElement(dtype, element);
}

int MantissaBits(DLDataType dtype) {
  if (Is(dtype, kDLFloat, 64)) return 52;
  if (Is(dtype, kDLFloat, 32)) return 23;
  if (Is(dtype, kDLFloat, 16)) return kHalf.mantissa_bits;
  if (Is(dtype, kDLBfloat, 16)) return kBfloat16.mantissa_bits;
  if (Is(dtype, INFINI_CCL_DL_FLOAT8_E4M3FN, 8)) return kE4M3.mantissa_bits;
  if (Is(dtype, INFINI_CCL_DL_FLOAT8_E5M2, 8)) return kE5M2.mantissa_bits;
  return 0;
}

std::vector<unsigned char> SentinelElement(DLDataType dtype) {
  const size_t width = ccl::ElementBytes(dtype);
  // Floating point: all ones is a NaN in every format. Unsigned: the largest
  // value, which no input or result reaches. Signed: the smallest (inputs
  // are symmetric, so it is never reached either). Bool: 0xff, not a bool.
  std::vector<unsigned char> element(width, 0xff);
  if (dtype.code == kDLInt) {
    std::fill(element.begin(), element.end(), 0x00);
    element.back() = 0x80;  // little-endian: the sign bit of the top byte
  }
  return element;
}

}  // namespace infini::conformance
