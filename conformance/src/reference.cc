#include "infini/conformance/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "infini/ccl/plugin_abi.h"
#include "type_match.h"

namespace infini::conformance {
namespace {

// The seed of every input: fixed, so that a failure reproduces.
constexpr uint64_t kInputSeed = 0x1f2e3d4c5b6a7988ULL;

// Moved data: distinct per rank and element, within the range `dtype`
// holds exactly, negative too where the type is signed.
double MovedValue(DLDataType dtype, int rank, int64_t index) {
  int64_t modulus = 0;  // values in [0, modulus), shifted down by `offset` when signed
  if (IsBool(dtype)) {
    modulus = 2;
  } else if (Is(dtype, INFINI_CCL_DL_FLOAT8_E4M3FN, 8)) {
    modulus = 33;  // −16..16
  } else if (Is(dtype, INFINI_CCL_DL_FLOAT8_E5M2, 8)) {
    modulus = 17;  // −8..8
  } else if (dtype.bits == 8) {
    modulus = 251;
  } else if (Is(dtype, kDLFloat, 16)) {
    modulus = 4095;
  } else if (Is(dtype, kDLBfloat, 16)) {
    modulus = 511;
  } else if (dtype.bits == 16) {
    modulus = 65521;  // int16, uint16
  } else if (dtype.bits == 32) {
    modulus = (int64_t{1} << 24) - 3;
  } else {
    modulus = (int64_t{1} << 40) - 87;
  }
  const int64_t position = (int64_t{rank} * 37 + (index % modulus) * 11 + 3) % modulus;
  const bool shift = IsSigned(dtype) && !IsBool(dtype);
  return static_cast<double>(shift ? position - modulus / 2 : position);
}

// Bool inputs for every purpose: a mix of true and false over ranks.
double BoolValue(int rank, int64_t index) { return (rank + index) % 3 == 0 ? 1.0 : 0.0; }

// A well-mixed 64-bit hash of (rank, index): inputs differ between ranks
// and elements in no pattern a plugin could get right by accident.
uint64_t Mix(int rank, int64_t index, uint64_t salt) {
  uint64_t x = kInputSeed ^ salt ^ (static_cast<uint64_t>(rank) * 0x9e3779b97f4a7c15ULL) ^
               (static_cast<uint64_t>(index) * 0xbf58476d1ce4e5b9ULL);
  x ^= x >> 31;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 29;
  return x;
}

// An integer in [-bound, bound] (signed types) or [0, bound] from the hash.
double Spread(DLDataType dtype, uint64_t hash, int64_t bound) {
  if (bound <= 0) return 0;
  if (!IsSigned(dtype)) return static_cast<double>(hash % static_cast<uint64_t>(bound + 1));
  return static_cast<double>(static_cast<int64_t>(hash % static_cast<uint64_t>(2 * bound + 1)) -
                             bound);
}

double ProdValue(DLDataType dtype, int rank, int world_size, int64_t index) {
  // Exactly one rank gives 2 and, in signed types, one other gives −1: ±2.
  const int64_t position = (rank + index) % world_size;
  if (position == 0) return 2;
  if (position == 1 && IsSigned(dtype)) return -1;
  return 1;
}

double Combine(DLDataType dtype, ReduceOp op, double accumulated, double value) {
  if (IsBool(dtype)) {
    const bool any = op == ReduceOp::kSum || op == ReduceOp::kMax;
    return any ? static_cast<double>(accumulated != 0 || value != 0)
               : static_cast<double>(accumulated != 0 && value != 0);
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return accumulated + value;
    case ReduceOp::kProd:
      return accumulated * value;
    case ReduceOp::kMax:
      return std::max(accumulated, value);
    case ReduceOp::kMin:
      return std::min(accumulated, value);
  }
  return accumulated;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "nan";
  if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

std::vector<size_t> ReversedDisplacements(const std::vector<size_t>& counts) {
  std::vector<size_t> displacements(counts.size(), 0);
  size_t next = 0;
  for (size_t peer = counts.size(); peer-- > 0;) {
    displacements[peer] = next;
    next += counts[peer];
  }
  return displacements;
}

}  // namespace

std::vector<DLDataType> AllDataTypes() {
  std::vector<DLDataType> types;
  for (int index = 0; index < ccl::kNumKnownDataTypes; ++index) {
    types.push_back(ccl::KnownDataType(index));
  }
  return types;
}

std::vector<ReduceOp> AllReduceOps() {
  return {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
}

namespace {

// How the inputs of one (type, purpose, world size) are made, decided once
// for a whole buffer.
class InputRule {
 public:
  InputRule(DLDataType dtype, Purpose purpose, int world_size)
      : dtype_(dtype), purpose_(purpose), world_size_(world_size) {
    if (!purpose || IsBool(dtype)) return;
    if (*purpose == ReduceOp::kSum || *purpose == ReduceOp::kAvg) {
      bound_ = ExactIntegerLimit(dtype) / std::max(world_size, 1);
    } else if (*purpose == ReduceOp::kMax || *purpose == ReduceOp::kMin) {
      bound_ = std::min<int64_t>(ExactIntegerLimit(dtype), int64_t{1} << 20);
    }
  }

  double Value(int rank, int64_t index) const {
    if (!purpose_) return MovedValue(dtype_, rank, index);
    if (IsBool(dtype_)) return BoolValue(rank, index);
    switch (*purpose_) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return Spread(dtype_, Mix(rank, index, 1), bound_);
      case ReduceOp::kProd:
        return ProdValue(dtype_, rank, world_size_, index);
      case ReduceOp::kMax:
      case ReduceOp::kMin:
        return Spread(dtype_, Mix(rank, index, 2), bound_);
    }
    return 0;
  }

 private:
  DLDataType dtype_;
  Purpose purpose_;
  int world_size_;
  int64_t bound_ = 0;
};

}  // namespace

double InputValue(DLDataType dtype, Purpose purpose, int rank, int world_size, int64_t index) {
  return InputRule(dtype, purpose, world_size).Value(rank, index);
}

std::vector<double> InputValues(DLDataType dtype, Purpose purpose, int rank, int world_size,
                                int64_t first_index, int64_t count) {
  const InputRule rule(dtype, purpose, world_size);
  std::vector<double> values(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (size_t offset = 0; offset < values.size(); ++offset) {
    values[offset] = rule.Value(rank, first_index + static_cast<int64_t>(offset));
  }
  return values;
}

bool HasReference(DLDataType dtype, ReduceOp op) {
  return !(IsBool(dtype) && op == ReduceOp::kAvg);
}

namespace {

// `op` over every rank's inputs [first, first + count), as ReducedValue.
std::vector<double> ReducedValues(DLDataType dtype, ReduceOp op, int world_size, int64_t first,
                                  int64_t count) {
  if (!HasReference(dtype, op)) {
    throw std::invalid_argument("host reference: " + std::string(ccl::ReduceOpName(op)) +
                                " is not defined on " + ccl::DataTypeName(dtype));
  }
  std::vector<double> result = InputValues(dtype, op, 0, world_size, first, count);
  for (int rank = 1; rank < world_size; ++rank) {
    const std::vector<double> theirs = InputValues(dtype, op, rank, world_size, first, count);
    for (size_t index = 0; index < result.size(); ++index) {
      result[index] = Combine(dtype, op, result[index], theirs[index]);
    }
  }
  if (op != ReduceOp::kAvg) return result;  // exact by the inputs' choice
  for (double& value : result) {
    value /= world_size;
    if (!IsFloatingPoint(dtype)) value = std::trunc(value);
    value = RoundTo(dtype, value);
  }
  return result;
}

}  // namespace

double ReducedValue(DLDataType dtype, ReduceOp op, int world_size, int64_t index) {
  return ReducedValues(dtype, op, world_size, index, 1)[0];
}

std::vector<double> ExpectAllReduce(DLDataType dtype, ReduceOp op, int world_size, int64_t count) {
  return ReducedValues(dtype, op, world_size, 0, count);
}

std::vector<double> ExpectReduceScatter(DLDataType dtype, ReduceOp op, int world_size, int rank,
                                        int64_t recv_count) {
  return ReducedValues(dtype, op, world_size, rank * recv_count, recv_count);
}

std::vector<double> ExpectBroadcast(DLDataType dtype, int world_size, int root, int64_t count) {
  return InputValues(dtype, std::nullopt, root, world_size, 0, count);
}

std::vector<double> ExpectAllGather(DLDataType dtype, int world_size, int64_t send_count) {
  std::vector<double> expected;
  expected.reserve(static_cast<size_t>(send_count * world_size));
  for (int peer = 0; peer < world_size; ++peer) {
    const std::vector<double> block =
        InputValues(dtype, std::nullopt, peer, world_size, 0, send_count);
    expected.insert(expected.end(), block.begin(), block.end());
  }
  return expected;
}

std::vector<double> ExpectAllToAll(DLDataType dtype, int world_size, int rank, int64_t count) {
  std::vector<double> expected;
  expected.reserve(static_cast<size_t>(count * world_size));
  for (int peer = 0; peer < world_size; ++peer) {
    const std::vector<double> block =
        InputValues(dtype, std::nullopt, peer, world_size, rank * count, count);
    expected.insert(expected.end(), block.begin(), block.end());
  }
  return expected;
}

std::vector<double> ExpectReceived(DLDataType dtype, int world_size, int source, int64_t count) {
  return InputValues(dtype, std::nullopt, source, world_size, 0, count);
}

std::vector<double> ExpectScatter(DLDataType dtype, int world_size, int root, int rank,
                                  int64_t count) {
  return InputValues(dtype, std::nullopt, root, world_size, rank * count, count);
}

VariableLayout::VariableLayout(int world_size, size_t base_count)
    : world_size_(world_size), base_count_(base_count) {}

size_t VariableLayout::Count(int from, int to) const {
  return base_count_ + static_cast<size_t>((from + 2 * to) % 3);
}

std::vector<size_t> VariableLayout::SendCounts(int rank) const {
  std::vector<size_t> counts(static_cast<size_t>(world_size_));
  for (int peer = 0; peer < world_size_; ++peer)
    counts[static_cast<size_t>(peer)] = Count(rank, peer);
  return counts;
}

std::vector<size_t> VariableLayout::SendDisplacements(int rank) const {
  std::vector<size_t> displacements(static_cast<size_t>(world_size_), 0);
  size_t next = 0;
  for (int peer = 0; peer < world_size_; ++peer) {
    displacements[static_cast<size_t>(peer)] = next;
    next += Count(rank, peer);
  }
  return displacements;
}

std::vector<size_t> VariableLayout::RecvCounts(int rank) const {
  std::vector<size_t> counts(static_cast<size_t>(world_size_));
  for (int peer = 0; peer < world_size_; ++peer)
    counts[static_cast<size_t>(peer)] = Count(peer, rank);
  return counts;
}

std::vector<size_t> VariableLayout::RecvDisplacements(int rank) const {
  return ReversedDisplacements(RecvCounts(rank));
}

size_t VariableLayout::SendTotal(int rank) const {
  size_t total = 0;
  for (size_t count : SendCounts(rank)) total += count;
  return total;
}

size_t VariableLayout::RecvTotal(int rank) const {
  size_t total = 0;
  for (size_t count : RecvCounts(rank)) total += count;
  return total;
}

size_t VariableLayout::ShareCount(int rank) const {
  return base_count_ + static_cast<size_t>((2 * rank + 1) % 3);
}

std::vector<size_t> VariableLayout::ShareCounts() const {
  std::vector<size_t> counts(static_cast<size_t>(world_size_));
  for (int peer = 0; peer < world_size_; ++peer)
    counts[static_cast<size_t>(peer)] = ShareCount(peer);
  return counts;
}

std::vector<size_t> VariableLayout::ShareDisplacements() const {
  return ReversedDisplacements(ShareCounts());
}

size_t VariableLayout::ShareTotal() const {
  size_t total = 0;
  for (size_t count : ShareCounts()) total += count;
  return total;
}

std::vector<double> ExpectAllToAllV(DLDataType dtype, const VariableLayout& layout, int rank) {
  const int world_size = layout.world_size();
  std::vector<double> expected(layout.RecvTotal(rank));
  const std::vector<size_t> displacements = layout.RecvDisplacements(rank);
  for (int peer = 0; peer < world_size; ++peer) {
    const size_t first = layout.SendDisplacements(peer)[static_cast<size_t>(rank)];
    const std::vector<double> block =
        InputValues(dtype, std::nullopt, peer, world_size, static_cast<int64_t>(first),
                    static_cast<int64_t>(layout.Count(peer, rank)));
    std::copy(block.begin(), block.end(),
              expected.begin() + static_cast<ptrdiff_t>(displacements[static_cast<size_t>(peer)]));
  }
  return expected;
}

std::vector<double> ExpectAllGatherV(DLDataType dtype, const VariableLayout& layout) {
  const int world_size = layout.world_size();
  std::vector<double> expected(layout.ShareTotal());
  const std::vector<size_t> displacements = layout.ShareDisplacements();
  for (int peer = 0; peer < world_size; ++peer) {
    const std::vector<double> block = InputValues(dtype, std::nullopt, peer, world_size, 0,
                                                  static_cast<int64_t>(layout.ShareCount(peer)));
    std::copy(block.begin(), block.end(),
              expected.begin() + static_cast<ptrdiff_t>(displacements[static_cast<size_t>(peer)]));
  }
  return expected;
}

std::vector<double> ExpectReduceScatterV(DLDataType dtype, ReduceOp op,
                                         const VariableLayout& layout, int rank) {
  const size_t first = layout.ShareDisplacements()[static_cast<size_t>(rank)];
  return ReducedValues(dtype, op, layout.world_size(), static_cast<int64_t>(first),
                       static_cast<int64_t>(layout.ShareCount(rank)));
}

int64_t ExactIntegerLimit(DLDataType dtype) {
  if (IsBool(dtype)) return 1;
  if (IsFloatingPoint(dtype)) {
    // Every integer up to 2^(mantissa bits + 1) is exact.
    return int64_t{1} << (MantissaBits(dtype) + 1);
  }
  // Values are computed in double: 2^53 at most. Unsigned types keep their
  // largest value free for the sentinel; signed types their smallest.
  const int bits = std::min<int>(dtype.bits, 54);
  const int64_t largest =
      IsSigned(dtype) ? (int64_t{1} << (bits - 1)) - 1 : (int64_t{1} << bits) - 2;
  return std::min<int64_t>(largest, int64_t{1} << 53);
}

double Tolerance(DLDataType dtype, Purpose purpose, int world_size) {
  if (!purpose || !IsFloatingPoint(dtype) || *purpose != ReduceOp::kAvg) return 0;
  // Average: a backend may divide the exact sum (one rounding) or, as NCCL
  // does, multiply each input by 1/n first and then add (n roundings of
  // values up to the inputs' bound). Allow n + 2 units of roundoff of the
  // inputs' magnitude.
  const double unit_roundoff = std::ldexp(1.0, -(MantissaBits(dtype) + 1));
  const double bound = static_cast<double>(ExactIntegerLimit(dtype) / std::max(world_size, 1));
  return (world_size + 2) * unit_roundoff * std::max(1.0, bound);
}

std::string ToleranceText(DLDataType dtype, Purpose purpose, int world_size) {
  const double tolerance = Tolerance(dtype, purpose, world_size);
  if (tolerance == 0) return "exact";
  char text[48];
  std::snprintf(text, sizeof(text), "within %.3g", tolerance);
  return text;
}

bool CloseEnough(DLDataType dtype, Purpose purpose, int world_size, double got, double want) {
  if (got == want) return true;
  return std::fabs(got - want) <= Tolerance(dtype, purpose, world_size);
}

std::string Comparison::Describe() const {
  if (ok()) return "";
  std::string text;
  if (first_wrong_index >= 0) {
    text = "element " + std::to_string(first_wrong_index) + " of " + std::to_string(compared) +
           " is " + FormatValue(first_got) + ", expected " + FormatValue(first_want);
    if (wrong > 1) text += " (" + std::to_string(wrong) + " wrong)";
  }
  if (length_differs) {
    if (!text.empty()) text += "; ";
    text += "the received length differs from the expected one";
  }
  return text;
}

Comparison Compare(DLDataType dtype, Purpose purpose, int world_size,
                   std::span<const double> expected, std::span<const double> actual) {
  Comparison result;
  const size_t common = std::min(expected.size(), actual.size());
  result.compared = static_cast<int64_t>(expected.size());
  for (size_t index = 0; index < common; ++index) {
    if (CloseEnough(dtype, purpose, world_size, actual[index], expected[index])) continue;
    if (result.wrong++ == 0) {
      result.first_wrong_index = static_cast<int64_t>(index);
      result.first_got = actual[index];
      result.first_want = expected[index];
    }
  }
  if (expected.size() != actual.size()) {
    result.length_differs = true;
    result.wrong += static_cast<int64_t>(std::max(expected.size(), actual.size()) - common);
  }
  return result;
}

}  // namespace infini::conformance
