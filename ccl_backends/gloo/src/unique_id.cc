#include "unique_id.h"

#include <cstring>
#include <string>

#include "errors.h"

namespace infini::gloo_backend {
namespace {

constexpr char kMagic[4] = {'I', 'G', 'L', 'O'};
constexpr uint8_t kLayoutVersion = 1;
constexpr size_t kHostOffset = 16;

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

[[noreturn]] void RefuseId(const std::string& why) {
  throw PluginError(infiniCclInvalidArgument,
                    "unique id was not made by the gloo backend's get_unique_id (" + why +
                        "); pass the bytes the root's get_unique_id returned, unchanged");
}

}  // namespace

infiniCclUniqueId EncodeUniqueId(const BootstrapAddress& address) {
  RequireArgument(!address.store_host.empty() && address.store_host.size() <= kMaxHostBytes,
                  "store host '" + address.store_host + "' does not fit in a unique id");
  infiniCclUniqueId id{};
  auto* bytes = reinterpret_cast<unsigned char*>(id.internal);
  std::memcpy(bytes, kMagic, sizeof(kMagic));
  bytes[4] = kLayoutVersion;
  bytes[5] = static_cast<unsigned char>(address.store_host.size());
  PutBigEndian(bytes + 6, address.store_port, 2);
  PutBigEndian(bytes + 8, address.nonce, 8);
  std::memcpy(bytes + kHostOffset, address.store_host.data(), address.store_host.size());
  return id;
}

BootstrapAddress DecodeUniqueId(const infiniCclUniqueId& id) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(id.internal);
  if (std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) RefuseId("no 'IGLO' magic");
  if (bytes[4] != kLayoutVersion) {
    RefuseId("layout version " + std::to_string(bytes[4]) + ", expected " +
             std::to_string(kLayoutVersion));
  }
  const size_t host_bytes = bytes[5];
  if (host_bytes == 0 || host_bytes > kMaxHostBytes) RefuseId("bad host length");
  for (size_t i = kHostOffset + host_bytes; i < INFINI_CCL_UNIQUE_ID_BYTES; ++i) {
    if (bytes[i] != 0) RefuseId("nonzero padding");
  }
  BootstrapAddress address;
  address.store_host.assign(reinterpret_cast<const char*>(bytes + kHostOffset), host_bytes);
  address.store_port = static_cast<uint16_t>(GetBigEndian(bytes + 6, 2));
  address.nonce = GetBigEndian(bytes + 8, 8);
  if (address.store_port == 0) RefuseId("store port 0");
  return address;
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

}  // namespace infini::gloo_backend
