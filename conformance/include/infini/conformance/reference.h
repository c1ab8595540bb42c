// The host reference: the values every rank puts into a collective, what
// each rank must hold afterwards, and the comparison that says whether it
// does. One implementation for ccl_conformance, ccl_bench --check and the
// backends' tests, computed in double precision on the host, for every
// element type the C++ API names (ints, float16, bfloat16, float32/64, fp8
// e4m3fn/e5m2, bool).
//
//   using namespace infini::conformance;
//   auto send = Encode(dtype, InputValues(dtype, ReduceOp::kSum, rank, world, 0, count));
//   ... all_reduce ...
//   Comparison result = Compare(dtype, ReduceOp::kSum, world, ExpectAllReduce(dtype, kSum,
//                               world, count), Decode(dtype, recv.data(), count));
//   if (!result.ok()) std::cerr << result.Describe();  // "element 17 of 1024 is 3, expected 4"
//
// Inputs are integers hashed from (rank, element, a fixed seed), chosen per
// type, operator and world size so that every result except a floating-point
// average is exact, and compared exactly: sums use the largest magnitudes
// whose sum over every rank stays exact in the type (a backend that
// accumulates in a narrower type is off), min/max spread over the type's
// exact integers (one unit in the last place off is wrong), products are ±2.
// Moved data is distinct per rank and element so a misplaced block shows. An
// `op` of nullopt means data that is only moved (broadcast, gathers,
// all-to-all, send/recv): compared bit-exactly.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "infini/ccl/capabilities.h"
#include "infini/ccl/dtype.h"

namespace infini::conformance {

using ccl::ReduceOp;
// The operator the values are reduced with, or nullopt for moved data.
using Purpose = std::optional<ReduceOp>;

// ---- Element types ----------------------------------------------------------

// Every element type of the C++ API, in ccl::KnownDataType order.
std::vector<DLDataType> AllDataTypes();
std::vector<ReduceOp> AllReduceOps();
bool IsFloatingPoint(DLDataType dtype);  // float16/32/64, bfloat16, fp8
bool IsSigned(DLDataType dtype);         // signed ints and floating point
bool IsBool(DLDataType dtype);
// Explicit mantissa bits of a floating-point type (0 for the others).
int MantissaBits(DLDataType dtype);
// The largest M such that every integer in [-M, M] (signed) or [0, M]
// (unsigned) is exact in `dtype` and never equals its sentinel.
int64_t ExactIntegerLimit(DLDataType dtype);
// One element that no input and no right result ever is (a NaN, an
// unsigned type's largest value, a signed type's smallest, 0xff for bool):
// what outputs and guard regions are filled with before a call.
std::vector<unsigned char> SentinelElement(DLDataType dtype);

// Host encoding of one element (round to nearest even for narrow floats;
// integers wrap as C++ conversions do; bool is 0 or 1, and decodes any
// other byte as its value, so it never passes for a bool). Throws
// std::invalid_argument for a type outside AllDataTypes().
void EncodeElement(DLDataType dtype, double value, void* element);
double DecodeElement(DLDataType dtype, const void* element);
std::vector<unsigned char> Encode(DLDataType dtype, std::span<const double> values);
std::vector<double> Decode(DLDataType dtype, const void* data, size_t count);
// `value` as `dtype` holds it (encoded, then decoded).
double RoundTo(DLDataType dtype, double value);

// ---- Inputs -------------------------------------------------------------------

// Element `index` of rank `rank`'s send buffer in a group of `world_size`.
double InputValue(DLDataType dtype, Purpose purpose, int rank, int world_size, int64_t index);
// Elements [first_index, first_index + count) of that buffer.
std::vector<double> InputValues(DLDataType dtype, Purpose purpose, int rank, int world_size,
                                int64_t first_index, int64_t count);
// Whether the reference defines `op` on `dtype` (not: average of bools).
// For bool, sum and max are logical or, prod and min logical and.
bool HasReference(DLDataType dtype, ReduceOp op);
// `op` over every rank's InputValue at `index`, rounded to `dtype`; average
// is NCCL's (the sum divided by the ranks, truncated for integers).
double ReducedValue(DLDataType dtype, ReduceOp op, int world_size, int64_t index);

// ---- What a rank holds afterwards (its whole receive view) -------------------

// all_reduce, and reduce on the root: `count` reduced elements.
std::vector<double> ExpectAllReduce(DLDataType dtype, ReduceOp op, int world_size, int64_t count);
// reduce_scatter: rank `rank`'s `recv_count` elements of the reduction of
// every rank's world_size × recv_count inputs.
std::vector<double> ExpectReduceScatter(DLDataType dtype, ReduceOp op, int world_size, int rank,
                                        int64_t recv_count);
// broadcast: the root's `count` inputs (moved data).
std::vector<double> ExpectBroadcast(DLDataType dtype, int world_size, int root, int64_t count);
// all_gather, and gather on the root: block p = rank p's `send_count` inputs.
std::vector<double> ExpectAllGather(DLDataType dtype, int world_size, int64_t send_count);
// all_to_all: block p = rank p's inputs [rank × count, (rank + 1) × count).
std::vector<double> ExpectAllToAll(DLDataType dtype, int world_size, int rank, int64_t count);
// recv from `source` (a ring, a pair): the source's `count` inputs.
std::vector<double> ExpectReceived(DLDataType dtype, int world_size, int source, int64_t count);
// scatter: the root's inputs [rank × count, (rank + 1) × count).
std::vector<double> ExpectScatter(DLDataType dtype, int world_size, int root, int rank,
                                  int64_t count);

// Counts and displacements of the variable-size collectives, the same on
// every rank. Counts vary with the ranks (some are 0 when base_count is 0)
// and receive blocks are laid out in reverse rank order, so that a backend
// that ignores counts or displacements is caught. A send buffer is the
// rank's InputValues from element 0; a receive buffer has RecvTotal
// elements.
class VariableLayout {
 public:
  VariableLayout(int world_size, size_t base_count);

  int world_size() const { return world_size_; }
  // Elements rank `from` sends to rank `to` (all_to_all_v).
  size_t Count(int from, int to) const;
  // all_to_all_v, for rank `rank`: per peer, in elements.
  std::vector<size_t> SendCounts(int rank) const;
  std::vector<size_t> SendDisplacements(int rank) const;  // in rank order
  std::vector<size_t> RecvCounts(int rank) const;
  std::vector<size_t> RecvDisplacements(int rank) const;  // in reverse rank order
  size_t SendTotal(int rank) const;
  size_t RecvTotal(int rank) const;

  // all_gather_v and reduce_scatter_v: rank p's share.
  size_t ShareCount(int rank) const;
  std::vector<size_t> ShareCounts() const;
  std::vector<size_t> ShareDisplacements() const;  // in reverse rank order
  size_t ShareTotal() const;

 private:
  int world_size_;
  size_t base_count_;
};

std::vector<double> ExpectAllToAllV(DLDataType dtype, const VariableLayout& layout, int rank);
// Every rank contributes InputValues(rank, 0, ShareCount(rank)).
std::vector<double> ExpectAllGatherV(DLDataType dtype, const VariableLayout& layout);
// Every rank's send buffer is its ShareTotal() inputs; rank `rank` receives
// ShareCount(rank) reduced elements from its share's displacement.
std::vector<double> ExpectReduceScatterV(DLDataType dtype, ReduceOp op,
                                         const VariableLayout& layout, int rank);

// ---- Comparison ---------------------------------------------------------------

// Largest allowed |got − want| over `world_size` ranks: 0 (exact) for moved
// data, integers, bool and every floating-point operator but average, whose
// result is not representable; there, n + 2 roundings of the inputs'
// magnitude. ToleranceText says it for a report ("exact", "within 0.5").
double Tolerance(DLDataType dtype, Purpose purpose, int world_size);
std::string ToleranceText(DLDataType dtype, Purpose purpose, int world_size);
bool CloseEnough(DLDataType dtype, Purpose purpose, int world_size, double got, double want);

struct Comparison {
  int64_t compared = 0;
  int64_t wrong = 0;  // elements off, plus any length difference
  int64_t first_wrong_index = -1;
  double first_got = 0;
  double first_want = 0;
  bool length_differs = false;

  bool ok() const { return wrong == 0; }
  // "element 17 of 1024 is 3, expected 4 (5 wrong)", or "" when ok.
  std::string Describe() const;
};
Comparison Compare(DLDataType dtype, Purpose purpose, int world_size,
                   std::span<const double> expected, std::span<const double> actual);

}  // namespace infini::conformance
