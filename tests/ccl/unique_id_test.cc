#include "infini/ccl/unique_id.h"

#include <gtest/gtest.h>

#include "infini/ccl/error.h"

namespace {

using infini::ccl::Error;
using infini::ccl::UniqueId;

// As large as HCCL's root info: ids are as long as their backend says.
UniqueId Sample(size_t bytes = 4108) {
  std::string raw(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) raw[i] = static_cast<char>(i * 7);
  return UniqueId(raw);
}

TEST(UniqueId, BytesRoundTripAtAnySize) {
  for (size_t bytes : {size_t{1}, size_t{128}, size_t{136}, size_t{4108}}) {
    const UniqueId id = Sample(bytes);
    EXPECT_EQ(id.ToBytes().size(), bytes);
    EXPECT_EQ(UniqueId::FromBytes(id.ToBytes()), id);
  }
}

TEST(UniqueId, HexRoundTrip) {
  const UniqueId id = Sample();
  EXPECT_EQ(id.ToHex().size(), 2 * 4108u);
  EXPECT_EQ(UniqueId::FromHex(id.ToHex()), id);
  EXPECT_EQ(id.ToHex().substr(0, 6), "00070e");
}

TEST(UniqueId, MalformedHexIsRefused) {
  EXPECT_THROW(UniqueId::FromHex("abc"), Error);
  EXPECT_THROW(UniqueId::FromHex(std::string(8, 'z')), Error);
}

TEST(UniqueId, DifferentBytesAreDifferentIds) {
  EXPECT_FALSE(Sample(128) == Sample(129));
  std::string changed = Sample().bytes();
  changed[4107] ^= 1;
  EXPECT_FALSE(UniqueId(changed) == Sample());
}

}  // namespace
