// The store's wire format, shared by server and client (and by the tests that
// send malformed input on purpose).
//
// Every message is a frame: a 4-byte little-endian body length, then the body.
// A body starts with a one-byte message type; the fields that follow are
// little-endian integers and strings (4-byte length, then the bytes).
//
// Hello: the client's first frame is kHello{kMagic, kVersion, client nonce}. A
// server without a run token answers kHelloOk at once. A server with a token
// answers kChallenge{server nonce, its own proof of the token over both
// nonces}; the client checks that proof (so a server that took the port
// without the token is found out), answers kProof{its proof over both
// nonces}, and the server answers kHelloOk, or kError and closes. A
// connection whose first frames are anything else is refused and closed.
// Requests are answered in order, one reply per request.
//
// One request is kBatch: several requests in one frame, each
// with a tag of the client's choosing, answered by kBatchReply frames that
// carry (tag, reply) pairs, in any order and over any number of frames (a
// Get that waits is answered when its key comes, the requests behind it at
// once). Each kBatchReply also says how many more of the connection's
// batches the server has handled (`batches_done`): every batch is counted
// in the frame that carries the answers it had at once (an empty frame if it
// had none), so a client knows when a batch it sent has been read.
//
// One version: a server speaks kVersion only and refuses any other hello
// naming both versions (client and store of one run come from one build).
// Every connection may send every request (a relay refuses kBatch: its
// clients are ranks, and its own batches go upstream).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace infini::rendezvous::wire {

// "INCS" (InfiniCCL store) when read as bytes.
inline constexpr uint32_t kMagic = 0x53434E49;
// 2: the hello may carry a challenge (run token).
// 3: both sides prove the token (the client sends a nonce too).
// 4: kBatch (tagged requests, answered out of order).
// 5: on-close keys; one version, no older one served.
inline constexpr uint32_t kVersion = 5;
// Bytes around each request of a kBatch (its tag and its body's length) and
// each reply of a kBatchReply.
inline constexpr size_t kBatchEntryOverheadBytes = 12;
inline constexpr size_t kFrameHeaderBytes = 4;
// Room for a message's type and field lengths around its keys and values.
inline constexpr size_t kMessageOverheadBytes = 64;
// The largest reply a client accepts before the server's hello told it the
// real limit.
inline constexpr size_t kMaxHelloReplyBytes = 1024;
// Bytes of each side's random challenge and of each proof (SHA-256).
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;
// Mixed into the proofs: a MAC made for another purpose with the same token is
// never a valid proof, and a server's proof is never a client's (a stranger
// cannot reflect one side's proof back as the other's).
inline constexpr std::string_view kClientProofContext = "infini-store-client-v3";
inline constexpr std::string_view kServerProofContext = "infini-store-server-v3";
// A client holding the token makes its nonce half random bytes, half a MAC of
// them under this context (a ticket): a server with the token sees at the
// first frame that the connection is no stranger's, and never sheds it to
// make room for strangers. Any other 32 bytes remain a valid nonce.
inline constexpr std::string_view kTicketContext = "infini-store-ticket-v3";
inline constexpr size_t kTicketRandomBytes = 16;

enum class MessageType : uint8_t {
  // Requests.
  kHello = 1,       // u32 magic, u32 version, str client nonce (kNonceBytes)
  kSet = 2,         // str key, str value
  kGet = 3,         // str key, i64 timeout_ms
  kAdd = 4,         // str key, i64 delta
  kCompareSet = 5,  // str key, str expected, str desired
  kDelete = 6,      // str key
  kCheck = 7,       // u32 key_count, key_count x str key
  kWait = 8,        // u32 key_count, key_count x str key, i64 timeout_ms
  kNumKeys = 9,     // (nothing)
  kProof = 10,      // str client proof (kProofBytes): the answer to kChallenge
  kBatch = 11,      // u32 count, count x (u64 tag, str request body)
  // On-close keys: the server sets key = value when this connection closes
  // for any reason but after a kCancelOnClose of the key (answered kOk).
  kSetOnClose = 12,     // str key, str value (replaces the key's earlier value)
  kCancelOnClose = 13,  // str key
  // Replies.
  kHelloOk = 101,     // u32 magic, u32 version, u64 max_message_bytes, u32 max_keys_per_request
  kOk = 102,          // (nothing)
  kValue = 103,       // str value
  kInteger = 104,     // i64 value
  kBool = 105,        // u8 0 or 1
  kTimeout = 106,     // (nothing): a Get or Wait reached its deadline
  kError = 107,       // str message: the request was refused
  kChallenge = 108,   // str server nonce (kNonceBytes), str server proof (kProofBytes)
  kBatchReply = 109,  // u32 batches_done, u32 count, count x (u64 tag, str reply body)
};

// Builds one frame. Fields are appended in order; Finish() fills in the length.
class FrameWriter {
 public:
  explicit FrameWriter(MessageType type) : bytes_(kFrameHeaderBytes, '\0') {
    U8(static_cast<uint8_t>(type));
  }
  FrameWriter& U8(uint8_t value) {
    bytes_.push_back(static_cast<char>(value));
    return *this;
  }
  FrameWriter& U32(uint32_t value) {
    for (int shift = 0; shift < 32; shift += 8) bytes_.push_back(static_cast<char>(value >> shift));
    return *this;
  }
  FrameWriter& U64(uint64_t value) { return I64(static_cast<int64_t>(value)); }
  FrameWriter& I64(int64_t value) {
    const auto bits = static_cast<uint64_t>(value);
    for (int shift = 0; shift < 64; shift += 8) bytes_.push_back(static_cast<char>(bits >> shift));
    return *this;
  }
  FrameWriter& Str(std::string_view value) {
    U32(static_cast<uint32_t>(value.size()));
    bytes_.append(value);
    return *this;
  }
  // Returns the whole frame, header included; the writer is spent.
  // `trailing_bytes` are body bytes that the caller sends right after it.
  std::string Finish(size_t trailing_bytes = 0) {
    const auto body_bytes =
        static_cast<uint32_t>(bytes_.size() - kFrameHeaderBytes + trailing_bytes);
    for (size_t i = 0; i < kFrameHeaderBytes; ++i)
      bytes_[i] = static_cast<char>(body_bytes >> (8 * i));
    return std::move(bytes_);
  }

 private:
  std::string bytes_;
};

inline uint32_t DecodeU32(const char* bytes) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= uint32_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
  return value;
}

// Reads the fields of one frame body. Every getter returns false (and reads
// nothing more) once the body is exhausted, so a truncated or lying message is
// detected, never read past.
class BodyReader {
 public:
  explicit BodyReader(std::string_view body) : body_(body) {}

  bool U8(uint8_t* value) {
    if (body_.size() - position_ < 1) return false;
    *value = static_cast<uint8_t>(body_[position_++]);
    return true;
  }
  bool U32(uint32_t* value) {
    if (body_.size() - position_ < 4) return false;
    *value = DecodeU32(body_.data() + position_);
    position_ += 4;
    return true;
  }
  bool I64(int64_t* value) {
    if (body_.size() - position_ < 8) return false;
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) {
      bits |= uint64_t{static_cast<uint8_t>(body_[position_ + i])} << (8 * i);
    }
    position_ += 8;
    *value = static_cast<int64_t>(bits);
    return true;
  }
  bool U64(uint64_t* value) {
    int64_t bits = 0;
    if (!I64(&bits)) return false;
    *value = static_cast<uint64_t>(bits);
    return true;
  }
  bool Str(std::string* value) {
    uint32_t length = 0;
    if (!U32(&length) || body_.size() - position_ < length) return false;
    value->assign(body_.data() + position_, length);
    position_ += length;
    return true;
  }
  size_t remaining_bytes() const { return body_.size() - position_; }
  bool AtEnd() const { return position_ == body_.size(); }

 private:
  std::string_view body_;
  size_t position_ = 0;
};

}  // namespace infini::rendezvous::wire
