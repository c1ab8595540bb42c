// What a gloo unique id carries, and its packed 128-byte layout:
//
//   bytes 0..3   magic "IGLO"    (a foreign id — NCCL's, zeros — is refused)
//   byte  4      layout version  (1)
//   byte  5      length L of the host text (1..kMaxHostBytes)
//   bytes 6..7   store port, big-endian
//   bytes 8..15  nonce, big-endian (random; names the group's keys)
//   bytes 16..   host text (numeric IPv4/IPv6 address), then zeros
#pragma once

#include <cstdint>
#include <string>

#include "infini/ccl/plugin_abi.h"

namespace infini::gloo_backend {

struct BootstrapAddress {
  std::string store_host;  // where the root's store server listens
  uint16_t store_port = 0;
  uint64_t nonce = 0;  // distinguishes groups that share one store
};

inline constexpr size_t kMaxHostBytes = INFINI_CCL_UNIQUE_ID_BYTES - 16;

infiniCclUniqueId EncodeUniqueId(const BootstrapAddress& address);
// Throws PluginError(infiniCclInvalidArgument) when `id` was not made by
// this plugin (wrong magic, version or malformed fields).
BootstrapAddress DecodeUniqueId(const infiniCclUniqueId& id);
// The nonce as 16 lowercase hex digits, for store key prefixes.
std::string NonceHex(uint64_t nonce);

}  // namespace infini::gloo_backend
