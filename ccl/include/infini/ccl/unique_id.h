// The id that the root of a group makes and every member needs to join it.
#pragma once

#include <string>
#include <string_view>

namespace infini::ccl {

// Opaque bytes of the size the backend declares (infiniCclPlugin_t::
// unique_id_bytes: 128 for NCCL, 4108 for HCCL). The backend checks the size
// when a communicator is made from it.
class UniqueId {
 public:
  UniqueId() = default;
  explicit UniqueId(std::string bytes) : bytes_(std::move(bytes)) {}

  const std::string& bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }
  // The bytes as they are, for a key-value store.
  const std::string& ToBytes() const { return bytes_; }
  static UniqueId FromBytes(std::string_view bytes) { return UniqueId(std::string(bytes)); }
  // Lowercase hex, for logs and text channels.
  std::string ToHex() const;
  // Throws infini::ccl::Error on an odd length or a non-hex character.
  static UniqueId FromHex(std::string_view hex);

  friend bool operator==(const UniqueId& a, const UniqueId& b) { return a.bytes_ == b.bytes_; }

 private:
  std::string bytes_;
};

}  // namespace infini::ccl
