// Bytes to requests and replies to bytes: the framing of a byte stream
// (FrameParser), the decoding of one request body (DecodeRequest) or of a
// batch of them (DecodeBatch), and the encoding of one reply (EncodeReply) or
// of a batch's replies (BatchReplyWriter), for the server; for a client that
// batches (the relay's upstream), the inverse (EncodeRequest, BatchWriter,
// DecodeBatchReply). No sockets, no allocation on a client's word: a frame's
// buffer grows only as its bytes arrive, and a key or request count is
// checked against the bytes that hold them before any is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wire_protocol.h"

namespace infini::rendezvous::wire {

// Splits a byte stream into frame bodies.
class FrameParser {
 public:
  // Capacity kept for a connection's next frames; above it a consumed
  // buffer is given back.
  static constexpr size_t kKeptCapacityBytes = size_t{64} << 10;

  enum class Status {
    kNeedMore,  // no whole frame buffered yet
    kFrame,     // *body is the next frame's body
    kTooLarge,  // the next frame announces more than the limit (or 0 bytes)
  };

  // Buffers bytes as they arrive.
  void Append(const char* bytes, size_t count);
  // Takes the next whole frame whose body is 1..max_body_bytes long. `*body`
  // stays valid until the next Append or Compact.
  Status Next(size_t max_body_bytes, std::string_view* body);
  // Drops consumed bytes, and gives memory back once little is buffered.
  void Compact();
  // Makes room for `bytes` unconsumed bytes in all (what is buffered
  // included), so that they arrive without the buffer growing by doubling:
  // what the server does once it has admitted a frame of that size.
  void Reserve(size_t bytes);
  // Releases everything (a connection being refused).
  void Clear();

  // Bytes received and not yet taken as frames.
  size_t buffered_bytes() const { return buffer_.size() - consumed_; }
  // Bytes of memory held (at least buffered_bytes()).
  size_t held_bytes() const { return buffer_.capacity(); }
  // The body length that the next frame announces, once its header arrived.
  uint32_t announced_body_bytes() const;

 private:
  std::string buffer_;
  size_t consumed_ = 0;
};

struct RequestLimits {
  size_t max_keys_per_request = 0;
};

// One decoded request (every type except the hello's).
struct Request {
  MessageType type = MessageType::kNumKeys;
  std::vector<std::string> keys;  // one key, except for kCheck and kWait
  std::string expected;           // kCompareSet
  std::string value;              // kSet's value, kCompareSet's desired value
  int64_t number = 0;             // kAdd's delta, kGet's and kWait's timeout_ms
};

// Decodes `body` into `request`. Returns "" on success, else why the body is
// not a valid request (unknown type, truncated, too many keys, extra bytes).
std::string DecodeRequest(std::string_view body, const RequestLimits& limits, Request* request);
// `request` as a body (type byte and fields, no frame header): what
// DecodeRequest reads back.
std::string EncodeRequest(const Request& request);

// One request of a kBatch, with the tag that its reply will carry.
struct TaggedRequest {
  uint64_t tag = 0;
  Request request;
};
// Decodes a kBatch body: at most limits.max_keys_per_request requests (the
// same cap as keys), each a valid request of another type than kBatch.
// Returns "" or why the body is not a valid batch.
std::string DecodeBatch(std::string_view body, const RequestLimits& limits,
                        std::vector<TaggedRequest>* requests);

// Builds a kBatch frame from request bodies (EncodeRequest's).
class BatchWriter {
 public:
  BatchWriter();
  void Add(uint64_t tag, std::string_view request_body);
  size_t count() const { return count_; }
  // The frame's body bytes so far (what max_message_bytes bounds).
  size_t body_bytes() const { return frame_.size() - kFrameHeaderBytes; }
  // The whole frame, header included; the writer is spent.
  std::string Finish();

 private:
  // The frame itself, its length and count filled in by Finish: a request's
  // bytes are copied once, however large.
  std::string frame_;
  uint32_t count_ = 0;
};

// A reply as the key-value table makes it.
struct Reply {
  MessageType type = MessageType::kOk;       // kOk, kValue, kInteger, kBool, kTimeout, kError
  std::shared_ptr<const std::string> value;  // kValue: shared with the table, never copied
  int64_t integer = 0;                       // kInteger; kBool: 0 or 1
  std::string error;                         // kError
};

// Bytes, then a value shared with the table (when set).
struct ReplyPiece {
  std::string bytes;
  std::shared_ptr<const std::string> value;
};

// A reply as bytes: `head` (frame header, type, fields, and the length of the
// value) followed by the bytes of `value` when it is set, then `more` (a
// kBatchReply's entries after its header: its values are shared as well, so a
// batch of Gets of one large value never copies it per reply).
struct EncodedReply {
  std::string head;
  std::shared_ptr<const std::string> value;
  std::vector<ReplyPiece> more;
  size_t size() const;
  // Its bytes less the shared values: what the server charges to its budget.
  size_t own_bytes() const;
};
EncodedReply EncodeReply(const Reply& reply);

// Builds a kBatchReply frame: (tag, reply) entries; values are shared.
class BatchReplyWriter {
 public:
  void Add(uint64_t tag, const Reply& reply);
  size_t count() const { return count_; }
  size_t body_bytes() const { return 1 + 4 + 4 + entry_bytes_; }
  bool empty() const { return count_ == 0; }
  // The whole frame, header included, telling the client that `batches_done`
  // more of its kBatch frames have been handled; the writer starts again
  // empty.
  EncodedReply Finish(uint32_t batches_done = 0);
  // The same as one string (values copied): for tests and fuzzers.
  std::string FinishCopied(uint32_t batches_done = 0);

 private:
  std::vector<ReplyPiece> entries_;
  size_t entry_bytes_ = 0;
  uint32_t count_ = 0;
};

// A reply body (type byte and fields) as a Reply: "" or why it is not one
// (a client's side: the value is copied).
std::string DecodeReply(std::string_view body, Reply* reply);

// One reply of a kBatchReply: its tag and its reply body (type byte and
// fields, as a reply frame's body).
struct TaggedReply {
  uint64_t tag = 0;
  std::string body;
};
// Decodes a kBatchReply body (a client's side: the server is trusted as far
// as its token, but not to be well-formed): how many more batches it says
// were handled, and its replies. Returns "" or why not.
std::string DecodeBatchReply(std::string_view body, uint32_t* batches_done,
                             std::vector<TaggedReply>* replies);

// The client's kHello: "" when `body` is a hello of our magic; else why not.
// `version` is set whenever the magic matched; `client_nonce` is what follows
// it (left empty for another version than kVersion, which the server
// refuses by version).
std::string DecodeHello(std::string_view body, uint32_t* version, std::string* client_nonce);
// The client's kProof: "" and the MAC, or why the body is not a proof.
std::string DecodeProof(std::string_view body, std::string* mac);

}  // namespace infini::rendezvous::wire
