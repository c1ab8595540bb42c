#include "infini/ccl/unique_id.h"

#include <cstring>
#include <string>

#include "infini/ccl/error.h"

namespace infini::ccl {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string UniqueId::ToBytes() const { return std::string(raw_.internal, sizeof(raw_.internal)); }

UniqueId UniqueId::FromBytes(std::string_view bytes) {
  if (bytes.size() != sizeof(infiniCclUniqueId::internal)) {
    throw Error(infiniCclInvalidArgument, "unique id has " + std::to_string(bytes.size()) +
                                              " bytes, expected " +
                                              std::to_string(INFINI_CCL_UNIQUE_ID_BYTES));
  }
  UniqueId id;
  std::memcpy(id.raw_.internal, bytes.data(), bytes.size());
  return id;
}

std::string UniqueId::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * sizeof(raw_.internal));
  for (char byte : raw_.internal) {
    const auto value = static_cast<unsigned char>(byte);
    hex.push_back(kDigits[value >> 4]);
    hex.push_back(kDigits[value & 0xF]);
  }
  return hex;
}

UniqueId UniqueId::FromHex(std::string_view hex) {
  if (hex.size() != 2 * sizeof(infiniCclUniqueId::internal)) {
    throw Error(infiniCclInvalidArgument, "unique id hex text has " + std::to_string(hex.size()) +
                                              " characters, expected " +
                                              std::to_string(2 * INFINI_CCL_UNIQUE_ID_BYTES));
  }
  UniqueId id;
  for (size_t i = 0; i < sizeof(id.raw_.internal); ++i) {
    const int high = HexDigit(hex[2 * i]);
    const int low = HexDigit(hex[2 * i + 1]);
    if (high < 0 || low < 0) {
      throw Error(infiniCclInvalidArgument,
                  "unique id hex text has a non-hex character at " + std::to_string(2 * i));
    }
    id.raw_.internal[i] = static_cast<char>(high * 16 + low);
  }
  return id;
}

bool operator==(const UniqueId& a, const UniqueId& b) {
  return std::memcmp(a.raw_.internal, b.raw_.internal, sizeof(a.raw_.internal)) == 0;
}

}  // namespace infini::ccl
