#include "unique_id.h"

#include <cstring>
#include <random>
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
constexpr size_t kHostOffset = 56;

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
      !AllZero(bytes, kNonceOffset + 8, kHostOffset) ||
      !AllZero(bytes, kHostOffset + host_bytes, kUniqueIdBytes)) {
    RefuseId("nonzero padding");
  }
  id.store_host.assign(reinterpret_cast<const char*>(bytes + kHostOffset), host_bytes);
  id.store_port = static_cast<uint16_t>(GetBigEndian(bytes + kPortOffset, 2));
  if (id.store_port == 0) RefuseId("store port 0");
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
