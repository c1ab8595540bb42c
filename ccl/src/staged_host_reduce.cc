// The host's reductions for ranks that meet in shared memory
// (staged_shared_memory.h): the numeric types whose arithmetic C++ has, each
// op over the ranks' sources in rank order. Half-precision and bool types
// stay on the transport, which has its own kernels for them.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "staged_shared_memory.h"

namespace infini::ccl::internal::staged {
namespace {

// Integers wrap as in unsigned arithmetic (signed overflow would be
// undefined); floating point is IEEE's.
template <typename T>
T Add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <typename T>
T Multiply(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // uint16_t would promote to int and overflow there: widen first.
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename T, typename Combine>
void Fold(T* out, const char* const* sources, int n, size_t count, Combine combine) {
  const T* first = reinterpret_cast<const T*>(sources[0]);
  std::copy(first, first + count, out);
  for (int r = 1; r < n; ++r) {
    const T* source = reinterpret_cast<const T*>(sources[r]);
    for (size_t i = 0; i < count; ++i) out[i] = combine(out[i], source[i]);
  }
}

template <typename T>
void ReduceAs(void* destination, const char* const* sources, int n, size_t count,
              infiniCclRedOp_t op) {
  T* out = static_cast<T*>(destination);
  switch (op) {
    case infiniCclSum:
    case infiniCclAvg:
      Fold<T>(out, sources, n, count, Add<T>);
      if (op == infiniCclAvg) {
        for (size_t i = 0; i < count; ++i) out[i] = static_cast<T>(out[i] / static_cast<T>(n));
      }
      return;
    case infiniCclProd:
      Fold<T>(out, sources, n, count, Multiply<T>);
      return;
    case infiniCclMin:
      Fold<T>(out, sources, n, count, [](T a, T b) { return std::min(a, b); });
      return;
    case infiniCclMax:
      Fold<T>(out, sources, n, count, [](T a, T b) { return std::max(a, b); });
      return;
    default:
      return;
  }
}

// Calls `body` with a value of the C++ type of `dtype`; false for types the
// host leaves to the transport.
template <typename Body>
bool WithType(DLDataType dtype, Body body) {
  if (dtype.lanes != 1) return false;
  switch (dtype.code) {
    case kDLFloat:
      if (dtype.bits == 32) return body(float{}), true;
      if (dtype.bits == 64) return body(double{}), true;
      return false;
    case kDLInt:
      if (dtype.bits == 8) return body(int8_t{}), true;
      if (dtype.bits == 16) return body(int16_t{}), true;
      if (dtype.bits == 32) return body(int32_t{}), true;
      if (dtype.bits == 64) return body(int64_t{}), true;
      return false;
    case kDLUInt:
      if (dtype.bits == 8) return body(uint8_t{}), true;
      if (dtype.bits == 16) return body(uint16_t{}), true;
      if (dtype.bits == 32) return body(uint32_t{}), true;
      if (dtype.bits == 64) return body(uint64_t{}), true;
      return false;
    default:
      return false;
  }
}

}  // namespace

bool HostReduces(DLDataType dtype, infiniCclRedOp_t op) {
  const bool known_op = op == infiniCclSum || op == infiniCclProd || op == infiniCclMin ||
                        op == infiniCclMax || op == infiniCclAvg;
  // An integer average rounds as the transport decides: left to it.
  if (!known_op || (op == infiniCclAvg && dtype.code != kDLFloat)) return false;
  return WithType(dtype, [](auto) {});
}

void HostReduce(void* out, const char* const* sources, int n, size_t count, DLDataType dtype,
                infiniCclRedOp_t op) {
  WithType(dtype, [&](auto type) { ReduceAs<decltype(type)>(out, sources, n, count, op); });
}

void HostDivide(void* data, size_t count, DLDataType dtype, int divisor) {
  WithType(dtype, [&](auto type) {
    using T = decltype(type);
    T* values = static_cast<T*>(data);
    for (size_t i = 0; i < count; ++i)
      values[i] = static_cast<T>(values[i] / static_cast<T>(divisor));
  });
}

}  // namespace infini::ccl::internal::staged
