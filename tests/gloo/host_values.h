// Host-side test data for every dtype the gloo backend supports: exact small
// values, their reference reductions, and comparison with a tolerance that
// fits each type.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::gloo_test {

struct TestType {
  DLDataType dtype;
  const char* name;
  bool is_float;
  bool is_signed;
};

// int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32,
// float64.
const std::vector<TestType>& AllTestTypes();
const std::vector<ccl::ReduceOp>& AllReduceOps();

// A buffer of `count` elements in `type`'s host representation.
class HostValues {
 public:
  HostValues(const TestType& type, size_t count);
  // Stores an exactly representable value (a small integer).
  void Set(size_t index, double value);
  double Get(size_t index) const;
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t bytes() const { return bytes_.size(); }
  size_t count() const { return count_; }

 private:
  TestType type_;
  size_t count_;
  std::vector<unsigned char> bytes_;
};

// Rank `rank`'s input for element `index` under `op`: small integers whose
// reduction over up to 8 ranks is exact in every type (no overflow, products
// of at most a few 2s, negative values only in signed types).
double InputValue(const TestType& type, ccl::ReduceOp op, int rank, size_t index);
// op over the inputs of ranks 0..world_size-1 at `index`, with NCCL's avg
// (integer division for integer types).
double ReferenceValue(const TestType& type, ccl::ReduceOp op, int world_size, size_t index);
// Whether `got` equals `want` to the precision of `type`.
bool CloseEnough(const TestType& type, double got, double want);

}  // namespace infini::gloo_test
