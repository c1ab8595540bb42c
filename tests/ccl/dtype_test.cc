#include "infini/ccl/dtype.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace {

using namespace infini::ccl;

TEST(DataTypes, NamesRoundTrip) {
  for (DLDataType type : {dtype::kInt8, dtype::kUInt8, dtype::kInt16, dtype::kUInt16, dtype::kInt32,
                          dtype::kUInt32, dtype::kInt64, dtype::kUInt64, dtype::kFloat16,
                          dtype::kBFloat16, dtype::kFloat32, dtype::kFloat64}) {
    EXPECT_TRUE(ParseDataType(DataTypeName(type)) == type) << DataTypeName(type);
  }
  EXPECT_TRUE(ParseDataType("bf16") == dtype::kBFloat16);
  EXPECT_TRUE(ParseDataType("fp32") == dtype::kFloat32);
  EXPECT_EQ(DataTypeName(DLDataType{kDLUInt, 16, 1}), "uint16");
}

TEST(DataTypes, UnknownNameListsTheKnownOnes) {
  try {
    ParseDataType("float7");
    FAIL();
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("unknown data type 'float7': expected one of int8"),
              std::string::npos);
  }
}

TEST(DataTypes, ElementBytes) {
  EXPECT_EQ(ElementBytes(dtype::kBFloat16), 2u);
  EXPECT_EQ(ElementBytes(dtype::kFloat64), 8u);
  EXPECT_EQ(ElementBytes(DLDataType{kDLFloat, 32, 4}), 16u);
}

TEST(Tensors, ContiguityFollowsStrides) {
  int64_t shape[2] = {3, 4};
  int64_t dense[2] = {4, 1};
  int64_t transposed[2] = {1, 3};
  DLTensor tensor{};
  tensor.ndim = 2;
  tensor.shape = shape;
  EXPECT_TRUE(IsContiguous(tensor));
  tensor.strides = dense;
  EXPECT_TRUE(IsContiguous(tensor));
  tensor.strides = transposed;
  EXPECT_FALSE(IsContiguous(tensor));
  EXPECT_EQ(NumElements(tensor), 12);
}

TEST(Tensors, FlatTensorCopiesOwnTheirShape) {
  float data[3];
  FlatTensor original(data, dtype::kFloat32, 3, DLDevice{kDLCPU, 0});
  FlatTensor copy = original;
  EXPECT_EQ(copy.dl().shape[0], 3);
  EXPECT_NE(copy.dl().shape, original.dl().shape);
}

}  // namespace
