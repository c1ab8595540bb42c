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

// Whether NCCL reduces `dtype` with `op`: every NCCL type with sum, prod,
// max, min and avg; bool (DLPack 1.1 code 6, one byte) with max and min only,
// as uint8, where they are logical or/and and the result stays 0 or 1.
bool Reducible(DLDataType dtype, infiniCclRedOp_t op);
// Whether data movement can carry `dtype`: any whole number of bytes.
bool Movable(DLDataType dtype);

// NCCL's type and operator for a reduction of `dtype` with `op`. Fails with
// infiniCclUnsupported (naming the type and what NCCL reduces) when
// Reducible() is false, infiniCclInvalidArgument for an unknown operator.
infiniCclResult_t ReductionTypeAndOp(DLDataType dtype, infiniCclRedOp_t op, std::string_view call,
                                     ncclDataType_t* type, ncclRedOp_t* nccl_op);

// Data movement (broadcast, all_gather, send, recv, all_to_all, gather, ...)
// does not look at values, so a type NCCL lacks (int16, bool, complex,
// vectors) moves as bytes. `*scale` = NCCL elements per element of `dtype`
// (1, or the element's bytes when it moves as uint8).
infiniCclResult_t MovementLayout(DLDataType dtype, std::string_view call, ncclDataType_t* type,
                                 size_t* scale);
// MovementLayout for one call: `*count` becomes the number of NCCL elements.
infiniCclResult_t MovementType(DLDataType dtype, std::string_view call, ncclDataType_t* type,
                               size_t* count);

}  // namespace infini::ccl::nccl
