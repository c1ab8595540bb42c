#include "reduce_kernels.h"

#include <cstdint>
#include <string>
#include <type_traits>

#include "errors.h"
#include "half_float.h"

namespace infini::gloo_backend {
namespace {

// How one element type is loaded into arithmetic and stored back. Integers
// compute in their unsigned twin so that overflow wraps (as NCCL's does)
// instead of being undefined; fp16/bf16 compute in float.
template <class T, bool kIntegral = std::is_integral_v<T>>
struct ComputeType {
  using type = T;
};
template <class T>
struct ComputeType<T, true> {
  using type = std::make_unsigned_t<T>;
};

template <class T>
struct Arithmetic {
  using Compute = typename ComputeType<T>::type;
  static Compute Load(T value) { return static_cast<Compute>(value); }
  static T Store(Compute value) { return static_cast<T>(value); }
  static bool Less(T a, T b) { return a < b; }
};
template <>
struct Arithmetic<Float16> {
  using Compute = float;
  static float Load(Float16 value) { return ToFloat(value); }
  static Float16 Store(float value) { return ToFloat16(value); }
  static bool Less(Float16 a, Float16 b) { return ToFloat(a) < ToFloat(b); }
};
template <>
struct Arithmetic<BFloat16> {
  using Compute = float;
  static float Load(BFloat16 value) { return ToFloat(value); }
  static BFloat16 Store(float value) { return ToBFloat16(value); }
  static bool Less(BFloat16 a, BFloat16 b) { return ToFloat(a) < ToFloat(b); }
};

template <class T>
void SumKernel(void* out, const void* a, const void* b, size_t count) {
  using A = Arithmetic<T>;
  auto* o = static_cast<T*>(out);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  using Compute = typename A::Compute;
  for (size_t i = 0; i < count; ++i) {
    o[i] = A::Store(static_cast<Compute>(A::Load(x[i]) + A::Load(y[i])));
  }
}

template <class T>
void ProdKernel(void* out, const void* a, const void* b, size_t count) {
  using A = Arithmetic<T>;
  auto* o = static_cast<T*>(out);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  using Compute = typename A::Compute;
  // uint8 operands promote to int (no overflow); the cast back wraps.
  for (size_t i = 0; i < count; ++i) {
    o[i] = A::Store(static_cast<Compute>(A::Load(x[i]) * A::Load(y[i])));
  }
}

template <class T>
void MinKernel(void* out, const void* a, const void* b, size_t count) {
  auto* o = static_cast<T*>(out);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < count; ++i) o[i] = Arithmetic<T>::Less(y[i], x[i]) ? y[i] : x[i];
}

template <class T>
void MaxKernel(void* out, const void* a, const void* b, size_t count) {
  auto* o = static_cast<T*>(out);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < count; ++i) o[i] = Arithmetic<T>::Less(x[i], y[i]) ? y[i] : x[i];
}

template <class T>
ReduceFunction KernelFor(infiniCclRedOp_t op) {
  switch (op) {
    case infiniCclSum:
    case infiniCclAvg:
      return &SumKernel<T>;
    case infiniCclProd:
      return &ProdKernel<T>;
    case infiniCclMin:
      return &MinKernel<T>;
    case infiniCclMax:
      return &MaxKernel<T>;
    default:
      throw PluginError(infiniCclInvalidArgument, "reduction op " +
                                                      std::to_string(static_cast<int>(op)) +
                                                      " is not one of sum, prod, max, min, avg");
  }
}

template <class T>
void Divide(void* data, size_t count, int world_size) {
  using A = Arithmetic<T>;
  auto* values = static_cast<T*>(data);
  if constexpr (std::is_integral_v<T>) {
    // Integer division of the signed value (the sum wrapped in unsigned).
    for (size_t i = 0; i < count; ++i)
      values[i] = static_cast<T>(values[i] / static_cast<T>(world_size));
  } else {
    using Compute = typename A::Compute;
    const Compute divisor = static_cast<Compute>(world_size);
    for (size_t i = 0; i < count; ++i) values[i] = A::Store(A::Load(values[i]) / divisor);
  }
}

// Calls `visit.template operator()<T>()` with the C++ type of `dtype`.
template <class Visitor>
auto VisitType(DLDataType dtype, Visitor&& visit) {
  if (dtype.lanes == 1) {
    switch (dtype.code) {
      case kDLInt:
        if (dtype.bits == 8) return visit.template operator()<int8_t>();
        if (dtype.bits == 32) return visit.template operator()<int32_t>();
        if (dtype.bits == 64) return visit.template operator()<int64_t>();
        break;
      case kDLUInt:
        if (dtype.bits == 8) return visit.template operator()<uint8_t>();
        if (dtype.bits == 32) return visit.template operator()<uint32_t>();
        if (dtype.bits == 64) return visit.template operator()<uint64_t>();
        break;
      case kDLFloat:
        if (dtype.bits == 16) return visit.template operator()<Float16>();
        if (dtype.bits == 32) return visit.template operator()<float>();
        if (dtype.bits == 64) return visit.template operator()<double>();
        break;
      case kDLBfloat:
        if (dtype.bits == 16) return visit.template operator()<BFloat16>();
        break;
      default:
        break;
    }
  }
  throw PluginError(infiniCclInvalidArgument,
                    "data type " + DataTypeName(dtype) +
                        " is not supported by the gloo backend (expected int8, uint8, int32, "
                        "uint32, int64, uint64, float16, bfloat16, float32 or float64)");
}

}  // namespace

std::string DataTypeName(DLDataType dtype) {
  const int bits = dtype.bits;
  if (dtype.lanes == 1) {
    switch (dtype.code) {
      case kDLInt:
        return "int" + std::to_string(bits);
      case kDLUInt:
        return "uint" + std::to_string(bits);
      case kDLFloat:
        return "float" + std::to_string(bits);
      case kDLBfloat:
        return "bfloat" + std::to_string(bits);
      case INFINI_CCL_DL_BOOL:
        if (bits == 8) return "bool";
        break;
      case INFINI_CCL_DL_FLOAT8_E4M3FN:
        if (bits == 8) return "float8_e4m3fn";
        break;
      case INFINI_CCL_DL_FLOAT8_E5M2:
        if (bits == 8) return "float8_e5m2";
        break;
      default:
        break;
    }
  }
  return "dtype(code=" + std::to_string(dtype.code) + ",bits=" + std::to_string(bits) +
         ",lanes=" + std::to_string(dtype.lanes) + ")";
}

size_t ElementBytes(DLDataType dtype) {
  return VisitType(dtype, []<class T>() { return sizeof(T); });
}

namespace {
// One-byte types that collectives move but never reduce.
bool IsByteOnlyType(DLDataType dtype) {
  return dtype.lanes == 1 && dtype.bits == 8 &&
         (dtype.code == INFINI_CCL_DL_BOOL || dtype.code == INFINI_CCL_DL_FLOAT8_E4M3FN ||
          dtype.code == INFINI_CCL_DL_FLOAT8_E5M2);
}
// int16 and uint16: moved as two-byte elements, never reduced (NCCL has no
// such type to reduce; a program that reduces them here would not port).
bool IsMoveOnlyInteger(DLDataType dtype) {
  return dtype.lanes == 1 && dtype.bits == 16 && (dtype.code == kDLInt || dtype.code == kDLUInt);
}
}  // namespace

size_t MovableElementBytes(DLDataType dtype) {
  if (IsByteOnlyType(dtype)) return 1;
  if (IsMoveOnlyInteger(dtype)) return 2;
  try {
    return ElementBytes(dtype);
  } catch (const PluginError&) {
    // Refused below, with the list of movable types.
  }
  throw PluginError(infiniCclInvalidArgument,
                    "data type " + DataTypeName(dtype) +
                        " is not supported by the gloo backend (expected int8, uint8, int16, "
                        "uint16, int32, uint32, int64, uint64, float16, bfloat16, float32, "
                        "float64, bool, float8_e4m3fn or float8_e5m2)");
}

bool SupportsReduction(DLDataType dtype, infiniCclRedOp_t op) {
  if (op < infiniCclSum || op >= infiniCclNumOps) return false;
  try {
    ElementBytes(dtype);
    return true;
  } catch (const PluginError&) {
    return false;
  }
}

ReduceFunction FindReduceFunction(DLDataType dtype, infiniCclRedOp_t op) {
  return VisitType(dtype, [op]<class T>() { return KernelFor<T>(op); });
}

void DivideByWorldSize(void* data, size_t count, DLDataType dtype, int world_size) {
  VisitType(dtype, [&]<class T>() { Divide<T>(data, count, world_size); });
}

const char* ReduceOpName(infiniCclRedOp_t op) {
  switch (op) {
    case infiniCclSum:
      return "sum";
    case infiniCclProd:
      return "prod";
    case infiniCclMax:
      return "max";
    case infiniCclMin:
      return "min";
    case infiniCclAvg:
      return "avg";
    default:
      return "unknown";
  }
}

}  // namespace infini::gloo_backend
