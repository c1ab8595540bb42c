#include "infini/conformance/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "infini/ccl/plugin_abi.h"

namespace infini::conformance {
namespace {

constexpr DLDataType kE4M3{INFINI_CCL_DL_FLOAT8_E4M3FN, 8, 1};
constexpr DLDataType kE5M2{INFINI_CCL_DL_FLOAT8_E5M2, 8, 1};
constexpr DLDataType kBool{INFINI_CCL_DL_BOOL, 8, 1};

unsigned Bits16(DLDataType dtype, double value) {
  const std::vector<unsigned char> bytes = Encode(dtype, std::vector<double>{value});
  return bytes[0] | (bytes[1] << 8);
}

TEST(Reference, CoversEveryTypeOfTheApi) {
  EXPECT_EQ(AllDataTypes().size(), static_cast<size_t>(ccl::kNumKnownDataTypes));
}

TEST(Reference, EveryTypeRoundTripsEveryInputItUses) {
  for (DLDataType dtype : AllDataTypes()) {
    for (Purpose purpose :
         {Purpose{}, Purpose{ReduceOp::kSum}, Purpose{ReduceOp::kProd}, Purpose{ReduceOp::kMax}}) {
      const std::vector<double> values = InputValues(dtype, purpose, 3, 4, 0, 200);
      const std::vector<unsigned char> bytes = Encode(dtype, values);
      ASSERT_EQ(bytes.size(), values.size() * ccl::ElementBytes(dtype));
      EXPECT_EQ(Decode(dtype, bytes.data(), values.size()), values) << ccl::DataTypeName(dtype);
    }
  }
}

TEST(Reference, NarrowFloatsHaveTheirStandardBits) {
  EXPECT_EQ(Bits16(ccl::dtype::kFloat16, 1.0), 0x3c00u);
  EXPECT_EQ(Bits16(ccl::dtype::kFloat16, -2.0), 0xc000u);
  EXPECT_EQ(Bits16(ccl::dtype::kBFloat16, 1.0), 0x3f80u);
  EXPECT_EQ(Encode(kE4M3, std::vector<double>{1.0})[0], 0x38);
  EXPECT_EQ(Encode(kE5M2, std::vector<double>{1.0})[0], 0x3c);
  EXPECT_EQ(Encode(kE4M3, std::vector<double>{1e6})[0], 0x7e);  // saturates at 448
  EXPECT_EQ(RoundTo(kE4M3, 1e6), 448.0);
  EXPECT_TRUE(std::isinf(RoundTo(kE5M2, 1e6)));
  EXPECT_EQ(RoundTo(ccl::dtype::kBFloat16, 257.0), 256.0);  // ties to even
}

TEST(Reference, SumIsTheSumOfEveryRanksInputs) {
  for (DLDataType dtype : AllDataTypes()) {
    if (IsBool(dtype)) continue;
    for (int64_t index = 0; index < 30; ++index) {
      double sum = 0;
      for (int rank = 0; rank < 8; ++rank) sum += InputValue(dtype, ReduceOp::kSum, rank, 8, index);
      EXPECT_EQ(ReducedValue(dtype, ReduceOp::kSum, 8, index), sum) << ccl::DataTypeName(dtype);
    }
  }
}

TEST(Reference, ProductsAreTwoOrMinusTwo) {
  for (int64_t index = 0; index < 10; ++index) {
    EXPECT_EQ(ReducedValue(ccl::dtype::kInt32, ReduceOp::kProd, 4, index), -2);
    EXPECT_EQ(ReducedValue(ccl::dtype::kUInt8, ReduceOp::kProd, 4, index), 2);
  }
}

TEST(Reference, IntegerAverageTruncatesTowardZero) {
  // Find an element whose int32 sum over 2 ranks is odd and negative.
  for (int64_t index = 0; index < 100; ++index) {
    const double sum = ReducedValue(ccl::dtype::kInt32, ReduceOp::kSum, 2, index);
    if (sum < 0 && std::fmod(sum, 2) != 0) {
      EXPECT_EQ(ReducedValue(ccl::dtype::kInt32, ReduceOp::kAvg, 2, index), std::trunc(sum / 2));
      return;
    }
  }
  FAIL() << "no odd negative sum among the inputs";
}

TEST(Reference, BoolReducesAsOrAndAnd) {
  EXPECT_FALSE(HasReference(kBool, ReduceOp::kAvg));
  for (int64_t index = 0; index < 12; ++index) {
    bool any = false, all = true;
    for (int rank = 0; rank < 3; ++rank) {
      const bool value = InputValue(kBool, ReduceOp::kSum, rank, 3, index) != 0;
      any = any || value;
      all = all && value;
    }
    EXPECT_EQ(ReducedValue(kBool, ReduceOp::kSum, 3, index), any ? 1 : 0);
    EXPECT_EQ(ReducedValue(kBool, ReduceOp::kMin, 3, index), all ? 1 : 0);
  }
}

TEST(Reference, MovedDataDiffersBetweenRanksAndNeighbours) {
  for (DLDataType dtype : AllDataTypes()) {
    if (IsBool(dtype)) continue;
    EXPECT_NE(InputValue(dtype, std::nullopt, 0, 4, 5), InputValue(dtype, std::nullopt, 1, 4, 5));
    EXPECT_NE(InputValue(dtype, std::nullopt, 0, 4, 5), InputValue(dtype, std::nullopt, 0, 4, 6));
  }
}

TEST(Reference, AllToAllBlockPComesFromRankP) {
  const std::vector<double> expected = ExpectAllToAll(ccl::dtype::kFloat32, 3, 1, 4);
  ASSERT_EQ(expected.size(), 12u);
  for (int peer = 0; peer < 3; ++peer) {
    for (int offset = 0; offset < 4; ++offset) {
      EXPECT_EQ(expected[static_cast<size_t>(peer * 4 + offset)],
                InputValue(ccl::dtype::kFloat32, std::nullopt, peer, 3, 4 + offset));
    }
  }
}

TEST(Reference, AllToAllVPlacesEachPeersBlockAtItsDisplacement) {
  const VariableLayout layout(3, 2);
  const int rank = 2;
  const std::vector<double> expected = ExpectAllToAllV(ccl::dtype::kInt64, layout, rank);
  ASSERT_EQ(expected.size(), layout.RecvTotal(rank));
  const auto counts = layout.RecvCounts(rank);
  const auto displacements = layout.RecvDisplacements(rank);
  EXPECT_EQ(displacements[2], 0u);  // reverse rank order
  for (int peer = 0; peer < 3; ++peer) {
    const size_t first = layout.SendDisplacements(peer)[rank];
    for (size_t i = 0; i < counts[peer]; ++i) {
      EXPECT_EQ(expected[displacements[peer] + i],
                InputValue(ccl::dtype::kInt64, std::nullopt, peer, 3, first + i));
    }
  }
}

TEST(Reference, VariableCountsDifferBetweenRanks) {
  const VariableLayout layout(3, 0);
  EXPECT_NE(layout.ShareCount(0), layout.ShareCount(1));
  EXPECT_NE(layout.Count(0, 1), layout.Count(1, 0));
}

TEST(Reference, ComparisonNamesTheFirstWrongElement) {
  const Comparison result = Compare(ccl::dtype::kInt32, ReduceOp::kSum, 2,
                                    std::vector<double>{1, 2, 3}, std::vector<double>{1, 5, 4});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.wrong, 2);
  EXPECT_EQ(result.Describe(), "element 1 of 3 is 5, expected 2 (2 wrong)");
}

TEST(Reference, EveryResultButAFloatAverageIsComparedExactly) {
  const std::vector<double> want{100};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin}) {
    EXPECT_EQ(Tolerance(ccl::dtype::kBFloat16, op, 4), 0);
    // One bfloat16 unit in the last place above 100 is 100.5.
    EXPECT_FALSE(Compare(ccl::dtype::kBFloat16, op, 4, want, std::vector<double>{100.5}).ok());
    // A float32 sum off by a few parts in a thousand.
    EXPECT_FALSE(Compare(ccl::dtype::kFloat32, op, 4, want, std::vector<double>{100.3}).ok());
  }
  EXPECT_GT(Tolerance(ccl::dtype::kFloat32, ReduceOp::kAvg, 4), 0);
  EXPECT_EQ(Tolerance(ccl::dtype::kInt32, ReduceOp::kAvg, 4), 0);
  EXPECT_EQ(ToleranceText(ccl::dtype::kFloat32, ReduceOp::kSum, 4), "exact");
  EXPECT_FALSE(
      Compare(ccl::dtype::kFloat16, std::nullopt, 4, want, std::vector<double>{100.1}).ok());
  EXPECT_FALSE(
      Compare(ccl::dtype::kFloat32, ReduceOp::kAvg, 4, want, std::vector<double>{NAN}).ok());
  EXPECT_FALSE(Compare(ccl::dtype::kFloat32, ReduceOp::kSum, 4, want, std::vector<double>{}).ok());
}

// A backend that accumulates float32 in bfloat16, or rounds a sum, must be
// off: the sums use magnitudes a narrower type cannot hold.
TEST(Reference, SumInputsFillTheTypesExactRange) {
  for (int world : {1, 2, 8}) {
    bool needs_full_precision = false;
    for (int64_t index = 0; index < 64; ++index) {
      for (int rank = 0; rank < world; ++rank) {
        const double value = InputValue(ccl::dtype::kFloat32, ReduceOp::kSum, rank, world, index);
        needs_full_precision |= RoundTo(ccl::dtype::kBFloat16, value) != value;
      }
      const double sum = ReducedValue(ccl::dtype::kFloat32, ReduceOp::kSum, world, index);
      EXPECT_LE(std::fabs(sum), std::ldexp(1.0, 24)) << "world " << world;
    }
    EXPECT_TRUE(needs_full_precision) << "world " << world;
  }
}

TEST(Reference, ABoolIsTheByteZeroOrOne) {
  const unsigned char bytes[] = {0, 1, 0x5a};
  EXPECT_EQ(Decode(kBool, bytes, 3), (std::vector<double>{0, 1, 0x5a}));
}

// An output left as it was before the call never passes.
TEST(Reference, TheSentinelIsNeverAnInputNorAResult) {
  for (DLDataType dtype : AllDataTypes()) {
    const std::vector<unsigned char> sentinel = SentinelElement(dtype);
    ASSERT_EQ(sentinel.size(), ccl::ElementBytes(dtype));
    const double value = DecodeElement(dtype, sentinel.data());
    for (int world : {1, 3, 8}) {
      for (int64_t index = 0; index < 300; ++index) {
        for (int rank = 0; rank < world; ++rank) {
          EXPECT_FALSE(CloseEnough(dtype, std::nullopt, world,
                                   InputValue(dtype, std::nullopt, rank, world, index), value))
              << ccl::DataTypeName(dtype);
        }
        for (ReduceOp op : AllReduceOps()) {
          if (!HasReference(dtype, op)) continue;
          EXPECT_FALSE(CloseEnough(dtype, op, world, ReducedValue(dtype, op, world, index), value))
              << ccl::DataTypeName(dtype) << " " << ccl::ReduceOpName(op);
        }
      }
    }
  }
}

}  // namespace
}  // namespace infini::conformance
