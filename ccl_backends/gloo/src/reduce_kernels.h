// Element-wise reductions for every dtype × op the plugin supports, in the
// shape gloo's reduce functions take: out[i] = a[i] op b[i] (out may alias a
// or b). gloo itself has sum/product/min/max only for some types; these cover
// the rest (bf16, fp16 arithmetic, unsigned types) and are used for all.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <string>

#include "infini/ccl/plugin_abi.h"

namespace infini::gloo_backend {

using ReduceFunction = void (*)(void* out, const void* a, const void* b, size_t count);

// "float32", "bfloat16", ..., or "dtype(code=C,bits=B,lanes=L)".
std::string DataTypeName(DLDataType dtype);
// Bytes of one element; throws PluginError(infiniCclInvalidArgument) naming
// the type when the plugin does not support it.
size_t ElementBytes(DLDataType dtype);
// Bytes of one element for collectives that only move data: the types above
// plus int16 and uint16 (two bytes) and bool, float8_e4m3fn and float8_e5m2
// (one byte each), none of which is reduced.
// Throws PluginError(infiniCclInvalidArgument) naming the type otherwise.
size_t MovableElementBytes(DLDataType dtype);
// Whether reductions with `op` are computed for `dtype` (no exception).
bool SupportsReduction(DLDataType dtype, infiniCclRedOp_t op);
// The element-wise function for `op` (avg: the sum; see DivideByWorldSize).
// Throws PluginError(infiniCclInvalidArgument) for an unknown op or dtype.
ReduceFunction FindReduceFunction(DLDataType dtype, infiniCclRedOp_t op);
// data[i] /= world_size; integer types use integer division, as NCCL does.
void DivideByWorldSize(void* data, size_t count, DLDataType dtype, int world_size);
// "sum", "prod", ...
const char* ReduceOpName(infiniCclRedOp_t op);

}  // namespace infini::gloo_backend
