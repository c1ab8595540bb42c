// gloo matches an unbound send with a recv by (peer, slot). Our own
// algorithms (reduce-scatter ring, point-to-point, v-collectives) use slot prefixes above
// gloo's collectives (0x01..0x08), so they never consume gloo's messages.
#pragma once

#include <cstddef>
#include <cstdint>

namespace infini::gloo_backend {

inline constexpr uint8_t kReduceScatterSlotPrefix = 0x40;
inline constexpr uint8_t kPointToPointSlotPrefix = 0x41;
inline constexpr uint8_t kAllToAllVSlotPrefix = 0x42;
inline constexpr uint8_t kAllGatherVSlotPrefix = 0x43;

inline uint64_t MakeSlot(uint8_t prefix, uint32_t tag) {
  return (static_cast<uint64_t>(prefix) << 56) | (static_cast<uint64_t>(tag) << 24);
}

// `slot` for one transfer of `bytes`, the size folded into the low 24 bits
// that MakeSlot leaves free. A send and a recv that disagree on the size then
// never meet: gloo would abort the process on the receiver's transport thread
// for a message larger than the buffer posted (and deliver a shorter one
// silently); instead both wait until the communicator's timeout, an error.
inline uint64_t SlotForBytes(uint64_t slot, size_t bytes) {
  const auto size = static_cast<uint64_t>(bytes);
  return slot | ((size ^ (size >> 24) ^ (size >> 48)) & 0xFFFFFFu);
}

}  // namespace infini::gloo_backend
