#include "host_reference.h"

#include <gtest/gtest.h>

#include <vector>

namespace infini::bench {
namespace {

TEST(HostReference, HalfAndBfloat16RoundTripSmallIntegersAndHalves) {
  const std::vector<double> values = {0, 1, 2, 3, 384, -7, 0.5, 1.5};
  for (DLDataType dtype : {ccl::dtype::kFloat16, ccl::dtype::kBFloat16}) {
    const std::vector<unsigned char> encoded = EncodeValues(dtype, values);
    ASSERT_EQ(encoded.size(), values.size() * 2);
    EXPECT_EQ(DecodeValues(dtype, encoded.data(), static_cast<int64_t>(values.size())), values)
        << ccl::DataTypeName(dtype);
  }
}

TEST(HostReference, HalfEncodingMatchesIeeeBits) {
  const std::vector<unsigned char> one = EncodeValues(ccl::dtype::kFloat16, {1.0});
  EXPECT_EQ(one[0] | (one[1] << 8), 0x3c00);
  const std::vector<unsigned char> bf_one = EncodeValues(ccl::dtype::kBFloat16, {1.0});
  EXPECT_EQ(bf_one[0] | (bf_one[1] << 8), 0x3f80);
}

TEST(HostReference, AllReduceSumIsTheSumOfEveryRanksInput) {
  const BufferPlan plan = PlanBuffers(Collective::kAllReduce, 64, 4, 4);
  const std::vector<double> expected = ExpectedOutput(
      Collective::kAllReduce, plan, ccl::dtype::kFloat32, ccl::ReduceOp::kSum, 0, 2, 4);
  ASSERT_EQ(expected.size(), 16u);
  for (int64_t index = 0; index < 16; ++index) {
    double sum = 0;
    for (int rank = 0; rank < 4; ++rank) {
      sum += InputValue(ccl::dtype::kFloat32, ccl::ReduceOp::kSum, rank, 4, index);
    }
    EXPECT_EQ(expected[static_cast<size_t>(index)], sum);
  }
}

TEST(HostReference, ProductInputsGiveExactlyTwo) {
  const BufferPlan plan = PlanBuffers(Collective::kAllReduce, 32, 4, 8);
  for (double value : ExpectedOutput(Collective::kAllReduce, plan, ccl::dtype::kFloat32,
                                     ccl::ReduceOp::kProd, 0, 0, 8)) {
    EXPECT_EQ(value, 2.0);
  }
}

TEST(HostReference, SendRecvReceivesThePreviousRanksBuffer) {
  const BufferPlan plan = PlanBuffers(Collective::kSendRecv, 16, 4, 3);
  const std::vector<double> expected = ExpectedOutput(
      Collective::kSendRecv, plan, ccl::dtype::kFloat32, ccl::ReduceOp::kSum, 0, 0, 3);
  EXPECT_EQ(expected, InputValues(ccl::dtype::kFloat32, ccl::ReduceOp::kSum, 2, 3, 4));
}

TEST(HostReference, AllToAllChunkQComesFromRankQ) {
  const BufferPlan plan = PlanBuffers(Collective::kAllToAll, 48, 4, 3);  // 4 elements per rank
  const std::vector<double> expected = ExpectedOutput(
      Collective::kAllToAll, plan, ccl::dtype::kFloat32, ccl::ReduceOp::kSum, 0, 1, 3);
  for (int source = 0; source < 3; ++source) {
    for (int64_t offset = 0; offset < 4; ++offset) {
      EXPECT_EQ(expected[static_cast<size_t>(source * 4 + offset)],
                InputValue(ccl::dtype::kFloat32, ccl::ReduceOp::kSum, source, 3, 4 + offset));
    }
  }
}

TEST(HostReference, ReduceOffTheRootHasNoExpectedOutput) {
  const BufferPlan plan = PlanBuffers(Collective::kReduce, 16, 4, 2);
  EXPECT_TRUE(
      ExpectedOutput(Collective::kReduce, plan, ccl::dtype::kFloat32, ccl::ReduceOp::kSum, 0, 1, 2)
          .empty());
}

TEST(HostReference, MismatchesAreCountedAndTheFirstDescribed) {
  std::string first;
  EXPECT_EQ(CountMismatches(ccl::dtype::kInt32, {1, 2, 3}, {1, 5, 4}, &first), 2);
  EXPECT_NE(first.find("element 1"), std::string::npos) << first;
  EXPECT_EQ(CountMismatches(ccl::dtype::kFloat16, {100}, {100.5}, nullptr), 0);
}

}  // namespace
}  // namespace infini::bench
