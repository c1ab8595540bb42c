// --check: the values every rank starts from, and what each rank must hold
// afterwards, computed on the host in double precision.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench_options.h"
#include "collective_plan.h"

namespace infini::bench {

// Input element `index` of `rank`'s send buffer. Small integers, so that sums
// over many ranks stay exact in every dtype (bfloat16 included); for prod,
// exactly one rank contributes a 2 to each element and the others a 1.
double InputValue(DLDataType dtype, ccl::ReduceOp op, int rank, int world_size, int64_t index);
// Elements [first_index, first_index + count) of `rank`'s send buffer.
std::vector<double> InputValues(DLDataType dtype, ccl::ReduceOp op, int rank, int world_size,
                                int64_t count, int64_t first_index = 0);

// Host encoding of values in `dtype` (float16 and bfloat16 included).
std::vector<unsigned char> EncodeValues(DLDataType dtype, const std::vector<double>& values);
std::vector<double> DecodeValues(DLDataType dtype, const void* data, int64_t count);

// What `rank` must hold in its receive buffer (recv_elements values; in
// place, the receive view of the one buffer). Empty when the output is
// unspecified (reduce on a non-root rank).
std::vector<double> ExpectedOutput(Collective collective, const BufferPlan& plan, DLDataType dtype,
                                   ccl::ReduceOp op, int root, int rank, int world_size);

// Number of elements of `actual` that differ from `expected` beyond the
// dtype's rounding; `first_mismatch` describes the first one.
int64_t CountMismatches(DLDataType dtype, const std::vector<double>& expected,
                        const std::vector<double>& actual, std::string* first_mismatch);

}  // namespace infini::bench
