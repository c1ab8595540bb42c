// libFuzzer harness: the server's framing and request decoding.
//
// Input: byte 0 picks how the rest is cut into reads (as a socket might
// deliver it); the rest is the byte stream of one connection. Every frame is
// decoded as a hello, a proof, a request, a batch of requests and (the relay
// upstream client's side) a reply and a batch of replies. Checked: nothing
// crashes or reads out of bounds (ASan), no buffer grows beyond what arrived,
// and a request or batch that decodes re-encodes to the very same body.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "request_codec.h"
#include "wire_protocol.h"

namespace {

using infini::rendezvous::wire::BatchWriter;
using infini::rendezvous::wire::DecodeBatch;
using infini::rendezvous::wire::DecodeBatchReply;
using infini::rendezvous::wire::DecodeHello;
using infini::rendezvous::wire::DecodeProof;
using infini::rendezvous::wire::DecodeReply;
using infini::rendezvous::wire::DecodeRequest;
using infini::rendezvous::wire::EncodeRequest;
using infini::rendezvous::wire::FrameParser;
using infini::rendezvous::wire::kFrameHeaderBytes;
using infini::rendezvous::wire::kNonceBytes;
using infini::rendezvous::wire::kVersion;
using infini::rendezvous::wire::Reply;
using infini::rendezvous::wire::Request;
using infini::rendezvous::wire::RequestLimits;
using infini::rendezvous::wire::TaggedReply;
using infini::rendezvous::wire::TaggedRequest;

constexpr size_t kMaxBodyBytes = 1024;
constexpr RequestLimits kLimits{.max_keys_per_request = 32};

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "store_frame_fuzz: %s\n", what);
  std::abort();
}

void CheckFrame(std::string_view body) {
  uint32_t version = 0;
  std::string client_nonce;
  if (DecodeHello(body, &version, &client_nonce).empty() && version == kVersion) {
    Require(client_nonce.size() == kNonceBytes, "a hello accepted with a malformed nonce");
  }
  std::string mac;
  (void)DecodeProof(body, &mac);
  // What the relay's upstream client reads; only that nothing breaks.
  std::vector<TaggedReply> replies;
  uint32_t batches_done = 0;
  (void)DecodeBatchReply(body, &batches_done, &replies);
  Reply reply;
  (void)DecodeReply(body, &reply);
  std::vector<TaggedRequest> batch;
  if (DecodeBatch(body, kLimits, &batch).empty()) {
    Require(!batch.empty() && batch.size() <= kLimits.max_keys_per_request,
            "a batch of more requests than the limit");
    BatchWriter writer;
    for (const TaggedRequest& tagged : batch) writer.Add(tagged.tag, EncodeRequest(tagged.request));
    Require(writer.Finish().substr(kFrameHeaderBytes) == body,
            "a decoded batch does not re-encode to its body");
  }
  Request request;
  if (!DecodeRequest(body, kLimits, &request).empty()) return;
  Require(request.keys.size() <= kLimits.max_keys_per_request, "more keys than the limit");
  Require(EncodeRequest(request) == body, "a decoded request does not re-encode to its body");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 64;
  std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  FrameParser parser;
  size_t received = 0;
  while (!stream.empty()) {
    const size_t count = std::min(chunk, stream.size());
    parser.Append(stream.data(), count);
    received += count;
    stream.remove_prefix(count);
    for (;;) {
      std::string_view body;
      const FrameParser::Status status = parser.Next(kMaxBodyBytes, &body);
      if (status == FrameParser::Status::kTooLarge) return 0;  // the server refuses and closes
      if (status == FrameParser::Status::kNeedMore) break;
      Require(!body.empty() && body.size() <= kMaxBodyBytes, "a frame outside its limits");
      CheckFrame(body);
    }
    Require(parser.buffered_bytes() <= received, "more buffered than received");
    Require(parser.held_bytes() <= 2 * received + 64, "memory beyond what arrived");
    parser.Compact();
  }
  return 0;
}
