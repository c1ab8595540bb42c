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

std::string UniqueId::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * bytes_.size());
  for (char byte : bytes_) {
    const auto value = static_cast<unsigned char>(byte);
    hex.push_back(kDigits[value >> 4]);
    hex.push_back(kDigits[value & 0xF]);
  }
  return hex;
}

UniqueId UniqueId::FromHex(std::string_view hex) {
  if (hex.size() % 2 != 0) {
    throw Error(infiniCclInvalidArgument, "unique id hex text has " + std::to_string(hex.size()) +
                                              " characters, expected an even number");
  }
  UniqueId id;
  id.bytes_.resize(hex.size() / 2);
  for (size_t i = 0; i < id.bytes_.size(); ++i) {
    const int high = HexDigit(hex[2 * i]);
    const int low = HexDigit(hex[2 * i + 1]);
    if (high < 0 || low < 0) {
      throw Error(infiniCclInvalidArgument,
                  "unique id hex text has a non-hex character at " + std::to_string(2 * i));
    }
    id.bytes_[i] = static_cast<char>(high * 16 + low);
  }
  return id;
}

}  // namespace infini::ccl
