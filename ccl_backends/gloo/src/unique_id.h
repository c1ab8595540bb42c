// What a gloo unique id carries, and its packed layout (kUniqueIdBytes):
//
//   bytes 0..3    magic "IGLO"    (a foreign id — NCCL's, zeros — is refused)
//   byte  4       layout version  (2)
//   byte  5       how ranks meet: 1 = the host's bootstrap, 2 = the root's
//                 private store server
//   byte  6       length L of the host text (0 with the host's bootstrap)
//   byte  7       zero
//   bytes 8..9    store port, big-endian (0 with the host's bootstrap)
//   bytes 10..15  zero
//   bytes 16..23  nonce, big-endian (random; names the group's keys)
//   bytes 24..55  the private store's run token (32 random bytes; the
//                 server's clients prove it), zero with the host's bootstrap
//   bytes 56..    host text (numeric IPv4/IPv6 address), then zeros
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace infini::gloo_backend {

inline constexpr size_t kUniqueIdBytes = 128;

enum class MeetingPlace : uint8_t {
  kHostBootstrap = 1,  // the store the host lends at get_unique_id and init
  kPrivateStore = 2,   // a TCP store server started by the root's process
};

struct GlooUniqueId {
  MeetingPlace place = MeetingPlace::kHostBootstrap;
  uint64_t nonce = 0;      // distinguishes groups that share one store
  std::string store_host;  // kPrivateStore: where the root's server listens
  uint16_t store_port = 0;
  // kPrivateStore: the server's token as kRunTokenHexDigits lowercase hex
  // digits (what TcpStoreClient::Connect proves); "" = none.
  std::string store_token;
};

inline constexpr size_t kRunTokenBytes = 32;
inline constexpr size_t kRunTokenHexDigits = 2 * kRunTokenBytes;

inline constexpr size_t kMaxHostBytes = kUniqueIdBytes - 56;

// Writes kUniqueIdBytes bytes at `out`.
void EncodeUniqueId(const GlooUniqueId& id, void* out);
// Throws PluginError(infiniCclInvalidArgument) when the bytes were not made
// by this plugin (wrong magic, version or malformed fields).
GlooUniqueId DecodeUniqueId(const void* bytes);
// The nonce as 16 lowercase hex digits, for store key prefixes.
std::string NonceHex(uint64_t nonce);
// A fresh random nonce.
uint64_t RandomNonce();

}  // namespace infini::gloo_backend
