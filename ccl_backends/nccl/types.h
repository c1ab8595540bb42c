// DLPack data types and our reduction operators as NCCL sees them.
#pragma once

#include <dlpack/dlpack.h>
#include <nccl.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::nccl {

// "float32", "bfloat16", "float8_e4m3fn", or "dtype(code=C,bits=B,lanes=L)".
std::string DataTypeName(DLDataType dtype);
// Bytes of one element; 0 when bits × lanes is not a whole number of bytes.
size_t ElementBytes(DLDataType dtype);

// NCCL's type for `dtype`, for reductions. Fails (infiniCclUnsupported, with
// the list of what NCCL reduces) for other types.
infiniCclResult_t ReductionType(DLDataType dtype, std::string_view call, ncclDataType_t* type);

// Data movement (broadcast, all_gather, send, recv, all_to_all) does not look
// at values, so a type NCCL lacks (int16, bool, complex, vectors) moves as
// bytes. `*count` is updated to the number of NCCL elements to move.
infiniCclResult_t MovementType(DLDataType dtype, std::string_view call, ncclDataType_t* type,
                               size_t* count);

infiniCclResult_t ReductionOp(infiniCclRedOp_t op, std::string_view call, ncclRedOp_t* nccl_op);

}  // namespace infini::ccl::nccl
