#include "types.h"

#include "errors.h"

namespace infini::ccl::nccl {
namespace {

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

infiniCclResult_t ReductionType(DLDataType dtype, std::string_view call, ncclDataType_t* type) {
  if (NativeType(dtype, type)) return infiniCclSuccess;
  return Fail(infiniCclUnsupported,
              std::string(call) + ": NCCL cannot reduce " + DataTypeName(dtype) +
                  " (it reduces int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, "
                  "float32, float64, float8_e4m3fn and float8_e5m2)");
}

infiniCclResult_t MovementType(DLDataType dtype, std::string_view call, ncclDataType_t* type,
                               size_t* count) {
  if (NativeType(dtype, type)) return infiniCclSuccess;
  const size_t element_bytes = ElementBytes(dtype);
  if (element_bytes == 0) {
    return Fail(infiniCclInvalidArgument, std::string(call) + ": " + DataTypeName(dtype) +
                                              " is not a whole number of bytes per element");
  }
  *type = ncclUint8;
  *count *= element_bytes;
  return infiniCclSuccess;
}

infiniCclResult_t ReductionOp(infiniCclRedOp_t op, std::string_view call, ncclRedOp_t* nccl_op) {
  switch (op) {
    case infiniCclSum:
      *nccl_op = ncclSum;
      return infiniCclSuccess;
    case infiniCclProd:
      *nccl_op = ncclProd;
      return infiniCclSuccess;
    case infiniCclMax:
      *nccl_op = ncclMax;
      return infiniCclSuccess;
    case infiniCclMin:
      *nccl_op = ncclMin;
      return infiniCclSuccess;
    case infiniCclAvg:
      *nccl_op = ncclAvg;
      return infiniCclSuccess;
    case infiniCclNumOps:
      break;
  }
  return Fail(infiniCclInvalidArgument, std::string(call) + ": reduction operator " +
                                            std::to_string(static_cast<int>(op)) +
                                            " is not one of sum, prod, max, min, avg");
}

}  // namespace infini::ccl::nccl
