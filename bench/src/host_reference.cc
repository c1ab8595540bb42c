#include "host_reference.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace infini::bench {
namespace {

uint16_t FloatToHalfBits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127 + 15;
  const uint32_t mantissa = bits & 0x7fffffu;
  if (exponent <= 0) return static_cast<uint16_t>(sign);             // tiny: zero
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // huge: infinity
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // nearest, ties to even
  return static_cast<uint16_t>(half);
}

float HalfBitsToFloat(uint16_t half) {
  const uint32_t sign = (half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) {
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t FloatToBfloat16Bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // nearest, ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bfloat16BitsToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

template <typename T>
void Store(double value, unsigned char* out) {
  const T typed = static_cast<T>(value);
  std::memcpy(out, &typed, sizeof(T));
}

template <typename T>
double Load(const unsigned char* in) {
  T typed;
  std::memcpy(&typed, in, sizeof(T));
  return static_cast<double>(typed);
}

void EncodeOne(DLDataType dtype, double value, unsigned char* out) {
  switch (dtype.code) {
    case kDLFloat:
      if (dtype.bits == 16) return Store<uint16_t>(FloatToHalfBits(static_cast<float>(value)), out);
      if (dtype.bits == 32) return Store<float>(value, out);
      if (dtype.bits == 64) return Store<double>(value, out);
      break;
    case kDLBfloat:
      if (dtype.bits == 16) {
        return Store<uint16_t>(FloatToBfloat16Bits(static_cast<float>(value)), out);
      }
      break;
    case kDLInt:
      if (dtype.bits == 8) return Store<int8_t>(value, out);
      if (dtype.bits == 32) return Store<int32_t>(value, out);
      if (dtype.bits == 64) return Store<int64_t>(value, out);
      break;
    case kDLUInt:
      if (dtype.bits == 8) return Store<uint8_t>(value, out);
      if (dtype.bits == 32) return Store<uint32_t>(value, out);
      if (dtype.bits == 64) return Store<uint64_t>(value, out);
      break;
    default:
      break;
  }
  throw std::invalid_argument("--check does not know dtype " + ccl::DataTypeName(dtype));
}

double DecodeOne(DLDataType dtype, const unsigned char* in) {
  switch (dtype.code) {
    case kDLFloat:
      if (dtype.bits == 16) return HalfBitsToFloat(static_cast<uint16_t>(Load<uint16_t>(in)));
      if (dtype.bits == 32) return Load<float>(in);
      if (dtype.bits == 64) return Load<double>(in);
      break;
    case kDLBfloat:
      if (dtype.bits == 16) return Bfloat16BitsToFloat(static_cast<uint16_t>(Load<uint16_t>(in)));
      break;
    case kDLInt:
      if (dtype.bits == 8) return Load<int8_t>(in);
      if (dtype.bits == 32) return Load<int32_t>(in);
      if (dtype.bits == 64) return Load<int64_t>(in);
      break;
    case kDLUInt:
      if (dtype.bits == 8) return Load<uint8_t>(in);
      if (dtype.bits == 32) return Load<uint32_t>(in);
      if (dtype.bits == 64) return Load<uint64_t>(in);
      break;
    default:
      break;
  }
  throw std::invalid_argument("--check does not know dtype " + ccl::DataTypeName(dtype));
}

// The reduction of element `index` over every rank's input.
double ReduceAcrossRanks(DLDataType dtype, ccl::ReduceOp op, int world_size, int64_t index) {
  double result = InputValue(dtype, op, 0, world_size, index);
  for (int rank = 1; rank < world_size; ++rank) {
    const double value = InputValue(dtype, op, rank, world_size, index);
    switch (op) {
      case ccl::ReduceOp::kSum:
      case ccl::ReduceOp::kAvg:
        result += value;
        break;
      case ccl::ReduceOp::kProd:
        result *= value;
        break;
      case ccl::ReduceOp::kMax:
        result = std::max(result, value);
        break;
      case ccl::ReduceOp::kMin:
        result = std::min(result, value);
        break;
    }
  }
  if (op == ccl::ReduceOp::kAvg) {
    result /= world_size;
    if (dtype.code == kDLInt || dtype.code == kDLUInt) result = std::trunc(result);
  }
  return result;
}

double Tolerance(DLDataType dtype) {
  if (dtype.code == kDLInt || dtype.code == kDLUInt) return 0.0;
  if (dtype.bits <= 16) return 1e-2;
  if (dtype.bits <= 32) return 1e-5;
  return 1e-12;
}

}  // namespace

double InputValue(DLDataType dtype, ccl::ReduceOp op, int rank, int world_size, int64_t index) {
  const int64_t position = (rank + index) % (op == ccl::ReduceOp::kProd ? world_size : 3);
  if (op == ccl::ReduceOp::kProd) return position == 0 ? 2.0 : 1.0;
  // 8-bit sums must stay below 128 even for 64 ranks.
  if (dtype.bits == 8) return static_cast<double>(position % 2);
  return static_cast<double>(position);
}

std::vector<double> InputValues(DLDataType dtype, ccl::ReduceOp op, int rank, int world_size,
                                int64_t count, int64_t first_index) {
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t index = 0; index < count; ++index) {
    values[static_cast<size_t>(index)] =
        InputValue(dtype, op, rank, world_size, first_index + index);
  }
  return values;
}

std::vector<unsigned char> EncodeValues(DLDataType dtype, const std::vector<double>& values) {
  const size_t element_bytes = ccl::ElementBytes(dtype);
  std::vector<unsigned char> encoded(values.size() * element_bytes);
  for (size_t index = 0; index < values.size(); ++index) {
    EncodeOne(dtype, values[index], encoded.data() + index * element_bytes);
  }
  return encoded;
}

std::vector<double> DecodeValues(DLDataType dtype, const void* data, int64_t count) {
  const size_t element_bytes = ccl::ElementBytes(dtype);
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::vector<double> values(static_cast<size_t>(count));
  for (size_t index = 0; index < values.size(); ++index) {
    values[index] = DecodeOne(dtype, bytes + index * element_bytes);
  }
  return values;
}

std::vector<double> ExpectedOutput(Collective collective, const BufferPlan& plan, DLDataType dtype,
                                   ccl::ReduceOp op, int root, int rank, int world_size) {
  const int64_t chunk = plan.chunk_elements;
  std::vector<double> expected(static_cast<size_t>(plan.recv_elements));
  for (int64_t index = 0; index < plan.recv_elements; ++index) {
    double value = 0;
    switch (collective) {
      case Collective::kAllReduce:
        value = ReduceAcrossRanks(dtype, op, world_size, index);
        break;
      case Collective::kReduce:
        if (rank != root) return {};
        value = ReduceAcrossRanks(dtype, op, world_size, index);
        break;
      case Collective::kBroadcast:
        value = InputValue(dtype, op, root, world_size, index);
        break;
      case Collective::kAllGather:  // chunk q comes from rank q's send buffer
        value = InputValue(dtype, op, static_cast<int>(index / chunk), world_size, index % chunk);
        break;
      case Collective::kReduceScatter:  // rank r's share of the reduction
        value = ReduceAcrossRanks(dtype, op, world_size, rank * chunk + index);
        break;
      case Collective::kAllToAll:  // chunk q is rank q's chunk addressed to this rank
        value = InputValue(dtype, op, static_cast<int>(index / chunk), world_size,
                           rank * chunk + index % chunk);
        break;
      case Collective::kSendRecv:  // from the previous rank of the ring
        value = InputValue(dtype, op, (rank + world_size - 1) % world_size, world_size, index);
        break;
    }
    expected[static_cast<size_t>(index)] = value;
  }
  return expected;
}

int64_t CountMismatches(DLDataType dtype, const std::vector<double>& expected,
                        const std::vector<double>& actual, std::string* first_mismatch) {
  const double tolerance = Tolerance(dtype);
  int64_t mismatches = 0;
  for (size_t index = 0; index < expected.size() && index < actual.size(); ++index) {
    const double error = std::fabs(actual[index] - expected[index]);
    if (error <= tolerance * std::max(1.0, std::fabs(expected[index]))) continue;
    if (mismatches++ == 0 && first_mismatch != nullptr) {
      *first_mismatch = "element " + std::to_string(index) + " is " +
                        std::to_string(actual[index]) + ", expected " +
                        std::to_string(expected[index]);
    }
  }
  return mismatches + static_cast<int64_t>(std::max(expected.size(), actual.size()) -
                                           std::min(expected.size(), actual.size()));
}

}  // namespace infini::bench
