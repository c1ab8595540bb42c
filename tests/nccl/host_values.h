// Host-side element encoding, so that tests compute references on the CPU
// for every type NCCL reduces (fp16, bf16 and fp8 included) without vendor
// headers.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <string>
#include <vector>

namespace infini::ccl::nccl_test {

struct TypeCase {
  DLDataType dtype;
  std::string name;
  // |result - reference| must be <= tolerance * max(1, |reference|).
  double tolerance;
  bool integer;
};

// Every type NCCL has; each reduces with every operator.
const std::vector<TypeCase>& ReducibleTypes();
// bool: a type NCCL lacks, moved as bytes; reduces with max and min only.
TypeCase BoolCase();
inline bool IsBool(const TypeCase& type) { return type.name == "bool"; }

size_t ElementBytes(DLDataType dtype);
// Stores `value` (exact for the small values tests use; integers wrap as C++
// conversions do; bool stores value != 0) as one element of `dtype` at `element`.
void Encode(DLDataType dtype, double value, void* element);
double Decode(DLDataType dtype, const void* element);

// A host array of elements of one type.
class HostArray {
 public:
  HostArray(DLDataType dtype, size_t count);
  void Set(size_t index, double value) { Encode(dtype_, value, bytes_.data() + index * width_); }
  double Get(size_t index) const { return Decode(dtype_, bytes_.data() + index * width_); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t bytes() const { return bytes_.size(); }
  size_t count() const { return width_ == 0 ? 0 : bytes_.size() / width_; }

 private:
  DLDataType dtype_;
  size_t width_;
  std::vector<unsigned char> bytes_;
};

}  // namespace infini::ccl::nccl_test
