#include "request_codec.h"

#include <string>
#include <utility>

namespace infini::rendezvous::wire {
namespace {

std::string TypeName(uint8_t type) { return "request type " + std::to_string(type); }

// "u32 count, count x str", checked against the limit and against the bytes
// left before anything is reserved.
std::string ReadKeys(BodyReader& reader, const RequestLimits& limits,
                     std::vector<std::string>* keys) {
  uint32_t count = 0;
  if (!reader.U32(&count)) return "truncated key count";
  if (count > limits.max_keys_per_request) {
    return std::to_string(count) + " keys in one request: the store's max_keys_per_request is " +
           std::to_string(limits.max_keys_per_request);
  }
  // Each key takes at least its 4-byte length.
  if (uint64_t{count} * 4 > reader.remaining_bytes()) return "key count larger than the message";
  keys->reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    std::string key;
    if (!reader.Str(&key)) return "truncated key";
    keys->push_back(std::move(key));
  }
  return "";
}

std::string ReadOneKey(BodyReader& reader, std::vector<std::string>* keys) {
  std::string key;
  if (!reader.Str(&key)) return "truncated key";
  keys->push_back(std::move(key));
  return "";
}

// The fields of `type` after its type byte.
std::string DecodeFields(MessageType type, BodyReader& reader, const RequestLimits& limits,
                         Request* request) {
  std::string error;
  switch (type) {
    case MessageType::kSet:
      if (!(error = ReadOneKey(reader, &request->keys)).empty()) return error;
      if (!reader.Str(&request->value)) return "truncated value";
      return "";
    case MessageType::kGet:
    case MessageType::kAdd:
      if (!(error = ReadOneKey(reader, &request->keys)).empty()) return error;
      if (!reader.I64(&request->number)) return "truncated integer";
      return "";
    case MessageType::kCompareSet:
      if (!(error = ReadOneKey(reader, &request->keys)).empty()) return error;
      if (!reader.Str(&request->expected) || !reader.Str(&request->value)) {
        return "truncated value";
      }
      return "";
    case MessageType::kDelete:
    case MessageType::kCancelOnClose:
      return ReadOneKey(reader, &request->keys);
    case MessageType::kSetOnClose:
      if (!(error = ReadOneKey(reader, &request->keys)).empty()) return error;
      if (!reader.Str(&request->value)) return "truncated value";
      return "";
    case MessageType::kCheck:
      return ReadKeys(reader, limits, &request->keys);
    case MessageType::kWait:
      if (!(error = ReadKeys(reader, limits, &request->keys)).empty()) return error;
      if (!reader.I64(&request->number)) return "truncated timeout";
      return "";
    case MessageType::kNumKeys:
      return "";
    default:
      return "unknown";
  }
}

}  // namespace

void FrameParser::Append(const char* bytes, size_t count) {
  Compact();
  buffer_.append(bytes, count);
}

FrameParser::Status FrameParser::Next(size_t max_body_bytes, std::string_view* body) {
  if (buffered_bytes() < kFrameHeaderBytes) return Status::kNeedMore;
  const uint32_t body_bytes = announced_body_bytes();
  if (body_bytes == 0 || body_bytes > max_body_bytes) return Status::kTooLarge;
  if (buffered_bytes() - kFrameHeaderBytes < body_bytes) return Status::kNeedMore;
  *body = std::string_view(buffer_).substr(consumed_ + kFrameHeaderBytes, body_bytes);
  consumed_ += kFrameHeaderBytes + body_bytes;
  return Status::kFrame;
}

void FrameParser::Compact() {
  if (consumed_ == 0) return;
  if (buffer_.capacity() > kKeptCapacityBytes && buffer_.size() - consumed_ <= kKeptCapacityBytes) {
    // One large message does not pin its memory for the life of the
    // connection, also when the start of the next one is buffered behind it.
    std::string(buffer_, consumed_).swap(buffer_);
  } else {
    buffer_.erase(0, consumed_);
  }
  consumed_ = 0;
}

void FrameParser::Reserve(size_t bytes) {
  Compact();
  if (bytes > buffer_.capacity()) buffer_.reserve(bytes);
}

void FrameParser::Clear() {
  std::string().swap(buffer_);
  consumed_ = 0;
}

uint32_t FrameParser::announced_body_bytes() const {
  if (buffered_bytes() < kFrameHeaderBytes) return 0;
  return DecodeU32(buffer_.data() + consumed_);
}

std::string DecodeRequest(std::string_view body, const RequestLimits& limits, Request* request) {
  BodyReader reader(body);
  uint8_t type_byte = 0;
  if (!reader.U8(&type_byte)) return "empty request";
  *request = Request{};
  request->type = static_cast<MessageType>(type_byte);
  const std::string error = DecodeFields(request->type, reader, limits, request);
  if (error == "unknown") return "unknown " + TypeName(type_byte);
  if (!error.empty()) return "malformed " + TypeName(type_byte) + ": " + error;
  if (!reader.AtEnd()) return "malformed " + TypeName(type_byte) + ": extra bytes";
  return "";
}

std::string EncodeRequest(const Request& request) {
  FrameWriter frame(request.type);
  const std::string no_key;
  const std::string& key = request.keys.empty() ? no_key : request.keys.front();
  auto keys = [&frame, &request] {
    frame.U32(static_cast<uint32_t>(request.keys.size()));
    for (const std::string& each : request.keys) frame.Str(each);
  };
  switch (request.type) {
    case MessageType::kSet:
    case MessageType::kSetOnClose:
      frame.Str(key).Str(request.value);
      break;
    case MessageType::kGet:
    case MessageType::kAdd:
      frame.Str(key).I64(request.number);
      break;
    case MessageType::kCompareSet:
      frame.Str(key).Str(request.expected).Str(request.value);
      break;
    case MessageType::kDelete:
    case MessageType::kCancelOnClose:
      frame.Str(key);
      break;
    case MessageType::kCheck:
      keys();
      break;
    case MessageType::kWait:
      keys();
      frame.I64(request.number);
      break;
    default:
      break;
  }
  return frame.Finish().substr(kFrameHeaderBytes);
}

std::string DecodeBatch(std::string_view body, const RequestLimits& limits,
                        std::vector<TaggedRequest>* requests) {
  BodyReader reader(body);
  uint8_t type = 0;
  uint32_t count = 0;
  requests->clear();
  if (!reader.U8(&type) || static_cast<MessageType>(type) != MessageType::kBatch) {
    return "not a batch";
  }
  if (!reader.U32(&count)) return "malformed batch: truncated request count";
  if (count == 0) return "malformed batch: no request in it";
  if (count > limits.max_keys_per_request) {
    return std::to_string(count) + " requests in one batch: the store's max_keys_per_request is " +
           std::to_string(limits.max_keys_per_request);
  }
  // Each request takes at least its tag, its length and its type byte.
  if (uint64_t{count} * (kBatchEntryOverheadBytes + 1) > reader.remaining_bytes()) {
    return "malformed batch: request count larger than the message";
  }
  requests->reserve(count);
  std::string request_body;
  for (uint32_t i = 0; i < count; ++i) {
    TaggedRequest tagged;
    if (!reader.U64(&tagged.tag) || !reader.Str(&request_body)) {
      return "malformed batch: truncated request " + std::to_string(i);
    }
    if (!request_body.empty() && static_cast<MessageType>(request_body[0]) == MessageType::kBatch) {
      return "malformed batch: a batch inside a batch";
    }
    if (std::string error = DecodeRequest(request_body, limits, &tagged.request); !error.empty()) {
      return "batch request " + std::to_string(i) + ": " + error;
    }
    requests->push_back(std::move(tagged));
  }
  if (!reader.AtEnd()) return "malformed batch: extra bytes";
  return "";
}

namespace {

void AppendLittleEndian(std::string* bytes, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) bytes->push_back(static_cast<char>(value >> (8 * i)));
}

}  // namespace

// Header, type and count: placeholders until Finish.
BatchWriter::BatchWriter() : frame_(kFrameHeaderBytes + 1 + 4, '\0') {}

void BatchWriter::Add(uint64_t tag, std::string_view request_body) {
  AppendLittleEndian(&frame_, tag, 8);
  AppendLittleEndian(&frame_, request_body.size(), 4);
  frame_.append(request_body);
  ++count_;
}

std::string BatchWriter::Finish() {
  std::string header;
  AppendLittleEndian(&header, body_bytes(), 4);
  header.push_back(static_cast<char>(MessageType::kBatch));
  AppendLittleEndian(&header, count_, 4);
  frame_.replace(0, header.size(), header);
  count_ = 0;
  return std::move(frame_);
}

void BatchReplyWriter::Add(uint64_t tag, const Reply& reply) {
  EncodedReply encoded = EncodeReply(reply);
  const size_t body_bytes = encoded.size() - kFrameHeaderBytes;
  FrameWriter entry(MessageType::kBatchReply);
  entry.U64(tag).U32(static_cast<uint32_t>(body_bytes));
  if (entries_.empty() || entries_.back().value) entries_.emplace_back();
  ReplyPiece& last = entries_.back();
  last.bytes.append(entry.Finish(), kFrameHeaderBytes + 1);
  last.bytes.append(encoded.head, kFrameHeaderBytes);
  last.value = std::move(encoded.value);
  entry_bytes_ += 8 + 4 + body_bytes;
  ++count_;
}

EncodedReply BatchReplyWriter::Finish(uint32_t batches_done) {
  EncodedReply frame;
  frame.head =
      FrameWriter(MessageType::kBatchReply).U32(batches_done).U32(count_).Finish(entry_bytes_);
  frame.more = std::exchange(entries_, {});
  entry_bytes_ = 0;
  count_ = 0;
  return frame;
}

std::string BatchReplyWriter::FinishCopied(uint32_t batches_done) {
  const EncodedReply frame = Finish(batches_done);
  std::string bytes = frame.head;
  for (const ReplyPiece& piece : frame.more) {
    bytes += piece.bytes;
    if (piece.value) bytes += *piece.value;
  }
  return bytes;
}

size_t EncodedReply::size() const {
  size_t bytes = own_bytes() + (value ? value->size() : 0);
  for (const ReplyPiece& piece : more) bytes += piece.value ? piece.value->size() : 0;
  return bytes;
}

size_t EncodedReply::own_bytes() const {
  size_t bytes = head.size();
  for (const ReplyPiece& piece : more) bytes += piece.bytes.size();
  return bytes;
}

std::string DecodeReply(std::string_view body, Reply* reply) {
  BodyReader reader(body);
  uint8_t type = 0;
  *reply = Reply{};
  if (!reader.U8(&type)) return "empty reply";
  reply->type = static_cast<MessageType>(type);
  bool whole = true;
  switch (reply->type) {
    case MessageType::kOk:
    case MessageType::kTimeout:
      break;
    case MessageType::kValue: {
      std::string value;
      whole = reader.Str(&value);
      reply->value = std::make_shared<const std::string>(std::move(value));
      break;
    }
    case MessageType::kInteger:
      whole = reader.I64(&reply->integer);
      break;
    case MessageType::kBool: {
      uint8_t flag = 0;
      whole = reader.U8(&flag) && flag <= 1;
      reply->integer = flag;
      break;
    }
    case MessageType::kError:
      whole = reader.Str(&reply->error);
      break;
    default:
      return "unknown reply type " + std::to_string(type);
  }
  if (!whole || !reader.AtEnd()) return "malformed reply of type " + std::to_string(type);
  return "";
}

std::string DecodeBatchReply(std::string_view body, uint32_t* batches_done,
                             std::vector<TaggedReply>* replies) {
  BodyReader reader(body);
  uint8_t type = 0;
  uint32_t count = 0;
  replies->clear();
  if (!reader.U8(&type) || static_cast<MessageType>(type) != MessageType::kBatchReply ||
      !reader.U32(batches_done) || !reader.U32(&count)) {
    return "not a batch reply";
  }
  if (uint64_t{count} * (kBatchEntryOverheadBytes + 1) > reader.remaining_bytes()) {
    return "malformed batch reply: reply count larger than the message";
  }
  replies->reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    TaggedReply tagged;
    if (!reader.U64(&tagged.tag) || !reader.Str(&tagged.body) || tagged.body.empty()) {
      return "malformed batch reply: truncated reply " + std::to_string(i);
    }
    replies->push_back(std::move(tagged));
  }
  if (!reader.AtEnd()) return "malformed batch reply: extra bytes";
  return "";
}

EncodedReply EncodeReply(const Reply& reply) {
  FrameWriter frame(reply.type);
  EncodedReply encoded;
  switch (reply.type) {
    case MessageType::kValue: {
      const size_t value_bytes = reply.value ? reply.value->size() : 0;
      frame.U32(static_cast<uint32_t>(value_bytes));
      encoded.head = frame.Finish(value_bytes);
      if (value_bytes > 0) encoded.value = reply.value;
      return encoded;
    }
    case MessageType::kInteger:
      frame.I64(reply.integer);
      break;
    case MessageType::kBool:
      frame.U8(reply.integer != 0 ? 1 : 0);
      break;
    case MessageType::kError:
      frame.Str(reply.error);
      break;
    default:
      break;
  }
  encoded.head = frame.Finish();
  return encoded;
}

std::string DecodeHello(std::string_view body, uint32_t* version, std::string* client_nonce) {
  BodyReader reader(body);
  uint8_t type = 0;
  uint32_t magic = 0;
  client_nonce->clear();
  if (!reader.U8(&type) || static_cast<MessageType>(type) != MessageType::kHello ||
      !reader.U32(&magic) || magic != kMagic || !reader.U32(version)) {
    return "not an InfiniCCL store client (bad hello)";
  }
  // Refused by version, with a clearer message.
  if (*version != kVersion) return "";
  if (!reader.Str(client_nonce) || !reader.AtEnd() || client_nonce->size() != kNonceBytes) {
    return "malformed hello: it must end with a " + std::to_string(kNonceBytes) +
           "-byte client nonce";
  }
  return "";
}

std::string DecodeProof(std::string_view body, std::string* mac) {
  BodyReader reader(body);
  uint8_t type = 0;
  if (!reader.U8(&type) || static_cast<MessageType>(type) != MessageType::kProof ||
      !reader.Str(mac) || !reader.AtEnd() || mac->size() != kProofBytes) {
    return "malformed proof of the run token";
  }
  return "";
}

}  // namespace infini::rendezvous::wire
