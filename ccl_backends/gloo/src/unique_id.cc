#include "unique_id.h"

#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include "errors.h"

namespace infini::gloo_backend {
namespace {

constexpr char kMagic[4] = {'I', 'G', 'L', 'O'};
constexpr uint8_t kLayoutVersion = 2;
constexpr size_t kPlaceOffset = 5;
constexpr size_t kHostLengthOffset = 6;
constexpr size_t kPortOffset = 8;
constexpr size_t kNonceOffset = 16;
constexpr size_t kTokenOffset = 24;
constexpr size_t kHostOffset = 56;
static_assert(kTokenOffset == kNonceOffset + 8 && kTokenOffset + kRunTokenBytes == kHostOffset,
              "the token fills the bytes between the nonce and the host text");

void PutBigEndian(unsigned char* out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    out[i] = static_cast<unsigned char>(value & 0xffu);
    value >>= 8;
  }
}

uint64_t GetBigEndian(const unsigned char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value = (value << 8) | in[i];
  return value;
}

bool AllZero(const unsigned char* bytes, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) {
    if (bytes[i] != 0) return false;
  }
  return true;
}

[[noreturn]] void RefuseId(const std::string& why) {
  throw PluginError(infiniCclInvalidArgument,
                    "unique id was not made by the gloo backend's get_unique_id (" + why +
                        "); pass the bytes the root's get_unique_id returned, unchanged");
}

int HexValue(char digit) {
  if (digit >= '0' && digit <= '9') return digit - '0';
  if (digit >= 'a' && digit <= 'f') return digit - 'a' + 10;
  return -1;
}

void PutToken(const std::string& hex, unsigned char* out) {
  bool valid = hex.size() == kRunTokenHexDigits;
  for (size_t i = 0; valid && i < kRunTokenBytes; ++i) {
    const int high = HexValue(hex[2 * i]);
    const int low = HexValue(hex[2 * i + 1]);
    valid = high >= 0 && low >= 0;
    if (valid) out[i] = static_cast<unsigned char>(high * 16 + low);
  }
  // The token is made by the plugin itself (never by a user): a bad one is a bug.
  if (!valid) throw std::logic_error("gloo unique id: the store token is not 64 hex digits");
}

std::string TokenHex(const unsigned char* in) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (size_t i = 0; i < kRunTokenBytes; ++i) {
    hex += kDigits[in[i] >> 4];
    hex += kDigits[in[i] & 0xfu];
  }
  return hex;
}

}  // namespace

void EncodeUniqueId(const GlooUniqueId& id, void* out) {
  const bool private_store = id.place == MeetingPlace::kPrivateStore;
  if (private_store) {
    RequireArgument(!id.store_host.empty() && id.store_host.size() <= kMaxHostBytes,
                    "store host '" + id.store_host + "' does not fit in a unique id");
  }
  auto* bytes = static_cast<unsigned char*>(out);
  std::memset(bytes, 0, kUniqueIdBytes);
  std::memcpy(bytes, kMagic, sizeof(kMagic));
  bytes[4] = kLayoutVersion;
  bytes[kPlaceOffset] = static_cast<unsigned char>(id.place);
  PutBigEndian(bytes + kNonceOffset, id.nonce, 8);
  if (private_store) {
    bytes[kHostLengthOffset] = static_cast<unsigned char>(id.store_host.size());
    PutBigEndian(bytes + kPortOffset, id.store_port, 2);
    std::memcpy(bytes + kHostOffset, id.store_host.data(), id.store_host.size());
    if (!id.store_token.empty()) PutToken(id.store_token, bytes + kTokenOffset);
  }
}

GlooUniqueId DecodeUniqueId(const void* in) {
  const auto* bytes = static_cast<const unsigned char*>(in);
  if (std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) RefuseId("no 'IGLO' magic");
  if (bytes[4] != kLayoutVersion) {
    RefuseId("layout version " + std::to_string(bytes[4]) + ", expected " +
             std::to_string(kLayoutVersion));
  }
  GlooUniqueId id;
  id.nonce = GetBigEndian(bytes + kNonceOffset, 8);
  const size_t host_bytes = bytes[kHostLengthOffset];
  switch (bytes[kPlaceOffset]) {
    case static_cast<unsigned char>(MeetingPlace::kHostBootstrap):
      id.place = MeetingPlace::kHostBootstrap;
      if (!AllZero(bytes, kHostLengthOffset, kNonceOffset) ||
          !AllZero(bytes, kNonceOffset + 8, kUniqueIdBytes)) {
        RefuseId("a host-bootstrap id with address fields");
      }
      return id;
    case static_cast<unsigned char>(MeetingPlace::kPrivateStore):
      id.place = MeetingPlace::kPrivateStore;
      break;
    default:
      RefuseId("unknown meeting place " + std::to_string(bytes[kPlaceOffset]));
  }
  if (host_bytes == 0 || host_bytes > kMaxHostBytes) RefuseId("bad host length");
  if (!AllZero(bytes, kHostLengthOffset + 1, kPortOffset) ||
      !AllZero(bytes, kPortOffset + 2, kNonceOffset) ||
      !AllZero(bytes, kHostOffset + host_bytes, kUniqueIdBytes)) {
    RefuseId("nonzero padding");
  }
  id.store_host.assign(reinterpret_cast<const char*>(bytes + kHostOffset), host_bytes);
  id.store_port = static_cast<uint16_t>(GetBigEndian(bytes + kPortOffset, 2));
  if (id.store_port == 0) RefuseId("store port 0");
  if (!AllZero(bytes, kTokenOffset, kTokenOffset + kRunTokenBytes)) {
    id.store_token = TokenHex(bytes + kTokenOffset);
  }
  return id;
}

std::string NonceHex(uint64_t nonce) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(16, '0');
  for (int i = 15; i >= 0; --i) {
    hex[i] = kDigits[nonce & 0xfu];
    nonce >>= 4;
  }
  return hex;
}

uint64_t RandomNonce() {
  std::random_device device;
  const uint64_t high = device();
  const uint64_t low = device();
  return (high << 32) ^ low;
}

}  // namespace infini::gloo_backend
