#include "types.h"

#include "errors.h"

namespace infini::ccl::nccl {
namespace {

// ReductionTypeAndOp passes our operators through unchanged.
static_assert(static_cast<int>(infiniCclSum) == ncclSum &&
              static_cast<int>(infiniCclProd) == ncclProd &&
              static_cast<int>(infiniCclMax) == ncclMax &&
              static_cast<int>(infiniCclMin) == ncclMin &&
              static_cast<int>(infiniCclAvg) == ncclAvg);

bool Matches(DLDataType dtype, int code, int bits) {
  return dtype.code == code && dtype.bits == bits && dtype.lanes == 1;
}

// The NCCL type with the same encoding as `dtype`, if there is one.
bool NativeType(DLDataType dtype, ncclDataType_t* type) {
  struct Entry {
    int code;
    int bits;
    ncclDataType_t nccl;
  };
  static constexpr Entry kTable[] = {
    {kDLInt, 8, ncclInt8},
    {kDLUInt, 8, ncclUint8},
    {kDLInt, 32, ncclInt32},
    {kDLUInt, 32, ncclUint32},
    {kDLInt, 64, ncclInt64},
    {kDLUInt, 64, ncclUint64},
    {kDLFloat, 16, ncclFloat16},
    {kDLFloat, 32, ncclFloat32},
    {kDLFloat, 64, ncclFloat64},
    {kDLBfloat, 16, ncclBfloat16},
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
    {INFINI_CCL_DL_FLOAT8_E4M3FN, 8, ncclFloat8e4m3},
    {INFINI_CCL_DL_FLOAT8_E5M2, 8, ncclFloat8e5m2},
#endif
  };
  for (const Entry& entry : kTable) {
    if (Matches(dtype, entry.code, entry.bits)) {
      *type = entry.nccl;
      return true;
    }
  }
  return false;
}

bool IsBool(DLDataType dtype) { return Matches(dtype, INFINI_CCL_DL_BOOL, 8); }

}  // namespace

std::string DataTypeName(DLDataType dtype) {
  if (dtype.lanes == 1) {
    const std::string bits = std::to_string(dtype.bits);
    switch (dtype.code) {
      case kDLInt:
        return "int" + bits;
      case kDLUInt:
        return "uint" + bits;
      case kDLFloat:
        return "float" + bits;
      case kDLBfloat:
        return "bfloat" + bits;
      case INFINI_CCL_DL_FLOAT8_E4M3FN:
        return "float8_e4m3fn";
      case INFINI_CCL_DL_FLOAT8_E5M2:
        return "float8_e5m2";
      case INFINI_CCL_DL_BOOL:
        return dtype.bits == 8 ? "bool" : "bool" + bits;
      default:
        break;
    }
  }
  return "dtype(code=" + std::to_string(dtype.code) + ",bits=" + std::to_string(dtype.bits) +
         ",lanes=" + std::to_string(dtype.lanes) + ")";
}

size_t ElementBytes(DLDataType dtype) {
  const size_t bits = static_cast<size_t>(dtype.bits) * dtype.lanes;
  return bits % 8 == 0 ? bits / 8 : 0;
}

bool IsFloat8(DLDataType dtype) {
  return Matches(dtype, INFINI_CCL_DL_FLOAT8_E4M3FN, 8) ||
         Matches(dtype, INFINI_CCL_DL_FLOAT8_E5M2, 8);
}

bool Reducible(DLDataType dtype, infiniCclRedOp_t op) {
  if (op < infiniCclSum || op >= infiniCclNumOps) return false;
  // NCCL (2.24 to 2.28.3, measured on 2.28.3) reduces fp8 with sum, prod,
  // max and min but answers ncclInvalidArgument to ncclAvg on fp8: its
  // average is a pre-multiplied sum, which has no fp8 kernel.
  if (op == infiniCclAvg && IsFloat8(dtype)) return false;
  ncclDataType_t type;
  if (NativeType(dtype, &type)) return true;
  return IsBool(dtype) && (op == infiniCclMax || op == infiniCclMin);
}

bool Movable(DLDataType dtype) { return ElementBytes(dtype) > 0; }

infiniCclResult_t ReductionTypeAndOp(DLDataType dtype, infiniCclRedOp_t op, std::string_view call,
                                     ncclDataType_t* type, ncclRedOp_t* nccl_op) {
  if (op < infiniCclSum || op >= infiniCclNumOps) [[unlikely]] {
    return Fail(infiniCclInvalidArgument, std::string(call) + ": reduction operator " +
                                              std::to_string(static_cast<int>(op)) +
                                              " is not one of sum, prod, max, min, avg");
  }
  // Our operators have NCCL's values (plugin_abi_common.h).
  *nccl_op = static_cast<ncclRedOp_t>(op);
  if (NativeType(dtype, type)) [[likely]] {
    return infiniCclSuccess;
  }
  if (IsBool(dtype) && (op == infiniCclMax || op == infiniCclMin)) {
    *type = ncclUint8;
    return infiniCclSuccess;
  }
  if (IsBool(dtype)) {
    return Fail(infiniCclUnsupported, std::string(call) +
                                          ": NCCL cannot reduce bool with this operator (bool "
                                          "reduces with max and min only, as uint8)");
  }
  return Fail(infiniCclUnsupported,
              std::string(call) + ": NCCL cannot reduce " + DataTypeName(dtype) +
                  " (it reduces int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, "
                  "float32, float64, float8_e4m3fn and float8_e5m2, and bool with max and min)");
}

infiniCclResult_t MovementLayout(DLDataType dtype, std::string_view call, ncclDataType_t* type,
                                 size_t* scale) {
  if (NativeType(dtype, type)) [[likely]] {
    *scale = 1;
    return infiniCclSuccess;
  }
  const size_t element_bytes = ElementBytes(dtype);
  if (element_bytes == 0) {
    return Fail(infiniCclInvalidArgument, std::string(call) + ": " + DataTypeName(dtype) +
                                              " is not a whole number of bytes per element");
  }
  *type = ncclUint8;
  *scale = element_bytes;
  return infiniCclSuccess;
}

infiniCclResult_t MovementType(DLDataType dtype, std::string_view call, ncclDataType_t* type,
                               size_t* count) {
  size_t scale = 1;
  CCLCHECK(MovementLayout(dtype, call, type, &scale));
  *count *= scale;
  return infiniCclSuccess;
}

}  // namespace infini::ccl::nccl
