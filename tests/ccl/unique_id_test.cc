#include "infini/ccl/unique_id.h"

#include <gtest/gtest.h>

#include "infini/ccl/error.h"

namespace {

using infini::ccl::Error;
using infini::ccl::UniqueId;

UniqueId Sample() {
  infiniCclUniqueId raw{};
  for (int i = 0; i < INFINI_CCL_UNIQUE_ID_BYTES; ++i) raw.internal[i] = static_cast<char>(i * 7);
  return UniqueId(raw);
}

TEST(UniqueId, BytesRoundTrip) {
  const UniqueId id = Sample();
  EXPECT_EQ(id.ToBytes().size(), static_cast<size_t>(INFINI_CCL_UNIQUE_ID_BYTES));
  EXPECT_EQ(UniqueId::FromBytes(id.ToBytes()), id);
}

TEST(UniqueId, HexRoundTrip) {
  const UniqueId id = Sample();
  EXPECT_EQ(UniqueId::FromHex(id.ToHex()), id);
  EXPECT_EQ(id.ToHex().substr(0, 6), "00070e");
}

TEST(UniqueId, WrongLengthIsRefused) {
  EXPECT_THROW(UniqueId::FromBytes("short"), Error);
  EXPECT_THROW(UniqueId::FromHex("abc"), Error);
  EXPECT_THROW(UniqueId::FromHex(std::string(2 * INFINI_CCL_UNIQUE_ID_BYTES, 'z')), Error);
}

}  // namespace
