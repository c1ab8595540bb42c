// The id that the root of a group makes and every member needs to join it.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl {

class UniqueId {
 public:
  UniqueId() = default;
  explicit UniqueId(const infiniCclUniqueId& raw) : raw_(raw) {}

  const infiniCclUniqueId& raw() const { return raw_; }
  // Exactly INFINI_CCL_UNIQUE_ID_BYTES bytes, for a key-value store.
  std::string ToBytes() const;
  // Throws infini::ccl::Error when `bytes` has the wrong length.
  static UniqueId FromBytes(std::string_view bytes);
  // Lowercase hex, for logs and text channels.
  std::string ToHex() const;
  static UniqueId FromHex(std::string_view hex);

  friend bool operator==(const UniqueId& a, const UniqueId& b);

 private:
  infiniCclUniqueId raw_{};
};

}  // namespace infini::ccl
