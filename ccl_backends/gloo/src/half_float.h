// IEEE binary16 (fp16) and bfloat16 as raw bits, with conversions to and
// from float that round to nearest, ties to even. Arithmetic on them is done
// in float, as NCCL's CPU-side reference does.
#pragma once

#include <bit>
#include <cstdint>

namespace infini::gloo_backend {

struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline float ToFloat(Float16 value) {
  const uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  const uint32_t exponent = (value.bits >> 10) & 0x1fu;
  const uint32_t mantissa = value.bits & 0x3ffu;
  if (exponent == 0x1f) {  // infinity or NaN
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa × 2^-24
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  // Rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline Float16 ToFloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity stays infinity, NaN stays quiet NaN
    return {static_cast<uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u))};
  }
  if (magnitude >= 0x477ff000u) {  // at or above 65520: rounds to infinity
    return {static_cast<uint16_t>(sign | 0x7c00u)};
  }
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14). Adding 0.5f puts the value where
    // one float ulp is 2^-24, the subnormal half step, so the FPU does the
    // rounding; the low mantissa bits are then the half's bits.
    const float shifted = std::bit_cast<float>(magnitude) + 0.5f;
    return {static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u))};
  }
  // Normal: rebias 127 → 15 and round the 13 dropped bits to nearest even.
  const uint32_t odd = (magnitude >> 13) & 1u;
  magnitude += 0xc8000fffu + odd;  // 0xc8000000 == -(112 << 23) modulo 2^32
  return {static_cast<uint16_t>(sign | (magnitude >> 13))};
}

inline float ToFloat(BFloat16 value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value.bits) << 16);
}

inline BFloat16 ToBFloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a quiet NaN
    return {static_cast<uint16_t>((bits >> 16) | 0x40u)};
  }
  const uint32_t odd = (bits >> 16) & 1u;
  return {static_cast<uint16_t>((bits + 0x7fffu + odd) >> 16)};
}

}  // namespace infini::gloo_backend
