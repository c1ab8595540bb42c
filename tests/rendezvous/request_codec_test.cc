// Framing and request decoding: what a client announces is never allocated,
// and every malformed body is refused with a reason.
#include "request_codec.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace infini::rendezvous::wire {
namespace {

constexpr RequestLimits kLimits{.max_keys_per_request = 16};

TEST(FrameParserTest, AnAnnouncedFrameIsNotAllocatedBeforeItsBytesArrive) {
  FrameParser parser;
  const std::string header("\x00\x00\x00\x04", 4);  // 64 MiB announced
  parser.Append(header.data(), header.size());
  parser.Append("abc", 3);
  std::string_view body;
  EXPECT_EQ(parser.Next(size_t{64} << 20, &body), FrameParser::Status::kNeedMore);
  EXPECT_EQ(parser.announced_body_bytes(), uint32_t{64} << 20);
  EXPECT_LT(parser.held_bytes(), size_t{4096});
  EXPECT_EQ(parser.Next(1024, &body), FrameParser::Status::kTooLarge);
}

TEST(FrameParserTest, FramesSplitAnywhereAreReassembledInOrder) {
  const std::string stream = FrameWriter(MessageType::kNumKeys).Finish() +
                             FrameWriter(MessageType::kSet).Str("k").Str("v").Finish();
  for (size_t split = 0; split <= stream.size(); ++split) {
    FrameParser parser;
    std::vector<std::string> bodies;
    std::string_view body;
    parser.Append(stream.data(), split);
    while (parser.Next(1024, &body) == FrameParser::Status::kFrame) bodies.emplace_back(body);
    parser.Append(stream.data() + split, stream.size() - split);
    while (parser.Next(1024, &body) == FrameParser::Status::kFrame) bodies.emplace_back(body);
    ASSERT_EQ(bodies.size(), 2u) << "split at " << split;
    EXPECT_EQ(static_cast<MessageType>(bodies[0][0]), MessageType::kNumKeys);
    EXPECT_EQ(static_cast<MessageType>(bodies[1][0]), MessageType::kSet);
    EXPECT_EQ(parser.buffered_bytes(), 0u);
  }
}

TEST(FrameParserTest, AnEmptyFrameIsRefused) {
  FrameParser parser;
  parser.Append("\0\0\0\0", 4);
  std::string_view body;
  EXPECT_EQ(parser.Next(1024, &body), FrameParser::Status::kTooLarge);
}

TEST(FrameParserTest, MemoryOfALargeFrameIsGivenBackOnceConsumed) {
  FrameParser parser;
  const std::string frame =
      FrameWriter(MessageType::kSet).Str("k").Str(std::string(1 << 20, 'x')).Finish();
  parser.Append(frame.data(), frame.size());
  std::string_view body;
  ASSERT_EQ(parser.Next(size_t{2} << 20, &body), FrameParser::Status::kFrame);
  parser.Compact();
  EXPECT_LT(parser.held_bytes(), size_t{1} << 20);
}

std::string Body(const std::string& frame) { return frame.substr(kFrameHeaderBytes); }

TEST(DecodeRequestTest, DecodesEveryRequestType) {
  Request request;
  ASSERT_EQ(
      DecodeRequest(Body(FrameWriter(MessageType::kCompareSet).Str("k").Str("e").Str("d").Finish()),
                    kLimits, &request),
      "");
  EXPECT_EQ(request.keys, std::vector<std::string>{"k"});
  EXPECT_EQ(request.expected, "e");
  EXPECT_EQ(request.value, "d");
  ASSERT_EQ(DecodeRequest(
                Body(FrameWriter(MessageType::kWait).U32(2).Str("a").Str("b").I64(250).Finish()),
                kLimits, &request),
            "");
  EXPECT_EQ(request.keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(request.number, 250);
}

TEST(DecodeRequestTest, TooManyKeysAreRefusedNamingTheLimit) {
  FrameWriter frame(MessageType::kWait);
  frame.U32(17);
  for (int i = 0; i < 17; ++i) frame.Str("k");
  Request request;
  const std::string error = DecodeRequest(Body(frame.I64(0).Finish()), kLimits, &request);
  EXPECT_NE(error.find("17 keys"), std::string::npos) << error;
  EXPECT_NE(error.find("max_keys_per_request is 16"), std::string::npos) << error;
}

TEST(DecodeRequestTest, AKeyCountLargerThanTheBodyIsRefusedBeforeReadingKeys) {
  Request request;
  const RequestLimits generous{.max_keys_per_request = size_t{1} << 30};
  const std::string error = DecodeRequest(
      Body(FrameWriter(MessageType::kCheck).U32(1u << 29).Finish()), generous, &request);
  EXPECT_NE(error.find("key count larger than the message"), std::string::npos) << error;
  EXPECT_EQ(request.keys.capacity(), 0u);
}

TEST(DecodeRequestTest, TruncatedExtraAndUnknownBodiesAreRefused) {
  Request request;
  EXPECT_NE(
      DecodeRequest(Body(FrameWriter(MessageType::kSet).U32(1000).Finish()), kLimits, &request),
      "");
  EXPECT_NE(DecodeRequest(Body(FrameWriter(MessageType::kDelete).Str("k").U8(0).Finish()), kLimits,
                          &request)
                .find("extra bytes"),
            std::string::npos);
  EXPECT_NE(
      DecodeRequest(Body(FrameWriter(static_cast<MessageType>(77)).Finish()), kLimits, &request)
          .find("unknown request type 77"),
      std::string::npos);
  // The hello and the proof are not key-value requests.
  EXPECT_NE(DecodeRequest(Body(FrameWriter(MessageType::kHello).U32(kMagic).U32(kVersion).Finish()),
                          kLimits, &request),
            "");
}

TEST(EncodeReplyTest, AValueIsSharedNotCopiedAndItsLengthIsInTheHead) {
  Reply reply;
  reply.type = MessageType::kValue;
  reply.value = std::make_shared<const std::string>("value");
  const EncodedReply encoded = EncodeReply(reply);
  EXPECT_EQ(encoded.value.get(), reply.value.get());
  const std::string whole = encoded.head + *encoded.value;
  EXPECT_EQ(whole, FrameWriter(MessageType::kValue).Str("value").Finish());
}

// GCC 12 warns on designated initializers that leave fields to their
// defaults; these name the fields that a test sets.
Request MakeRequest(MessageType type, std::vector<std::string> keys = {}, std::string value = "",
                    int64_t number = 0, std::string expected = "") {
  Request request;
  request.type = type;
  request.keys = std::move(keys);
  request.value = std::move(value);
  request.number = number;
  request.expected = std::move(expected);
  return request;
}

Reply MakeReply(MessageType type, int64_t integer = 0, std::string error = "",
                std::shared_ptr<const std::string> value = nullptr) {
  Reply reply;
  reply.type = type;
  reply.integer = integer;
  reply.error = std::move(error);
  reply.value = std::move(value);
  return reply;
}

// Every request the relay forwards reads back as it was.
TEST(BatchCodecTest, EveryRequestEncodesToWhatDecodesBackToIt) {
  std::vector<Request> requests(8);
  requests[0] = MakeRequest(MessageType::kSet, {"k"}, std::string("v\0w", 3));
  requests[1] = MakeRequest(MessageType::kGet, {"k"}, "", 250);
  requests[2] = MakeRequest(MessageType::kAdd, {"n"}, "", -3);
  requests[3] = MakeRequest(MessageType::kCompareSet, {"k"}, "b", 0, "a");
  requests[4] = MakeRequest(MessageType::kDelete, {"k"});
  requests[5] = MakeRequest(MessageType::kCheck, {"a", "b"});
  requests[6] = MakeRequest(MessageType::kWait, {"a", "b", "c"}, "", 9);
  requests[7] = MakeRequest(MessageType::kNumKeys);
  for (const Request& request : requests) {
    Request decoded;
    ASSERT_EQ(DecodeRequest(EncodeRequest(request), kLimits, &decoded), "");
    EXPECT_EQ(decoded.type, request.type);
    EXPECT_EQ(decoded.keys, request.keys);
    EXPECT_EQ(decoded.expected, request.expected);
    EXPECT_EQ(decoded.value, request.value);
    EXPECT_EQ(decoded.number, request.number);
  }
}

TEST(BatchCodecTest, ABatchCarriesItsRequestsAndTagsInOrder) {
  BatchWriter writer;
  writer.Add(7, EncodeRequest(MakeRequest(MessageType::kGet, {"late"}, "", 1000)));
  writer.Add(3, EncodeRequest(MakeRequest(MessageType::kSet, {"k"}, "v")));
  EXPECT_EQ(writer.count(), 2u);
  const std::string frame = writer.Finish();
  EXPECT_EQ(DecodeU32(frame.data()), frame.size() - kFrameHeaderBytes);
  std::vector<TaggedRequest> requests;
  ASSERT_EQ(DecodeBatch(Body(frame), kLimits, &requests), "");
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].tag, 7u);
  EXPECT_EQ(requests[0].request.type, MessageType::kGet);
  EXPECT_EQ(requests[0].request.number, 1000);
  EXPECT_EQ(requests[1].tag, 3u);
  EXPECT_EQ(requests[1].request.value, "v");
}

TEST(BatchCodecTest, MalformedOrOversizedBatchesAreRefusedWithAReason) {
  std::vector<TaggedRequest> requests;
  const std::string set = EncodeRequest(MakeRequest(MessageType::kSet, {"k"}, "v"));
  BatchWriter too_many;
  for (uint64_t tag = 0; tag <= kLimits.max_keys_per_request; ++tag) too_many.Add(tag, set);
  EXPECT_NE(DecodeBatch(Body(too_many.Finish()), kLimits, &requests).find("max_keys_per_request"),
            std::string::npos);
  BatchWriter nested;
  BatchWriter inner;
  inner.Add(1, set);
  nested.Add(1, Body(inner.Finish()));
  EXPECT_NE(DecodeBatch(Body(nested.Finish()), kLimits, &requests).find("a batch inside a batch"),
            std::string::npos);
  // A count that the bytes cannot hold is refused before anything is reserved.
  EXPECT_NE(DecodeBatch(Body(FrameWriter(MessageType::kBatch).U32(16).U64(1).Finish()), kLimits,
                        &requests)
                .find("larger than the message"),
            std::string::npos);
  EXPECT_NE(DecodeBatch(Body(FrameWriter(MessageType::kBatch).U32(0).Finish()), kLimits, &requests),
            "");
  BatchWriter bad_request;
  bad_request.Add(1, "\x63");  // an unknown type
  EXPECT_NE(DecodeBatch(Body(bad_request.Finish()), kLimits, &requests).find("batch request 0"),
            std::string::npos);
  BatchWriter trailing;
  trailing.Add(1, set);
  EXPECT_NE(DecodeBatch(Body(trailing.Finish()) + "x", kLimits, &requests).find("extra bytes"),
            std::string::npos);
}

TEST(BatchCodecTest, ABatchReplyCarriesEachReplyWithItsTag) {
  BatchReplyWriter writer;
  writer.Add(9, MakeReply(MessageType::kValue, 0, "", std::make_shared<const std::string>("id")));
  writer.Add(4, MakeReply(MessageType::kTimeout));
  writer.Add(5, MakeReply(MessageType::kError, 0, "refused"));
  writer.Add(6, MakeReply(MessageType::kBool, 1));
  std::vector<TaggedReply> replies;
  uint32_t batches_done = 0;
  ASSERT_EQ(DecodeBatchReply(Body(writer.FinishCopied(2)), &batches_done, &replies), "");
  EXPECT_EQ(batches_done, 2u);
  EXPECT_TRUE(writer.empty());
  ASSERT_EQ(replies.size(), 4u);
  Reply reply;
  EXPECT_EQ(replies[0].tag, 9u);
  ASSERT_EQ(DecodeReply(replies[0].body, &reply), "");
  EXPECT_EQ(*reply.value, "id");
  ASSERT_EQ(DecodeReply(replies[1].body, &reply), "");
  EXPECT_EQ(reply.type, MessageType::kTimeout);
  ASSERT_EQ(DecodeReply(replies[2].body, &reply), "");
  EXPECT_EQ(reply.error, "refused");
  ASSERT_EQ(DecodeReply(replies[3].body, &reply), "");
  EXPECT_EQ(reply.integer, 1);
  EXPECT_NE(DecodeReply(std::string("\x68\x01", 2), &reply), "");  // truncated integer
  EXPECT_NE(DecodeBatchReply(Body(FrameWriter(MessageType::kBatchReply).U32(0).U32(9).Finish()),
                             &batches_done, &replies),
            "");
  // A batch handled with nothing to answer yet is told in an empty frame.
  ASSERT_EQ(DecodeBatchReply(Body(writer.FinishCopied(1)), &batches_done, &replies), "");
  EXPECT_EQ(batches_done, 1u);
  EXPECT_TRUE(replies.empty());
}

}  // namespace
}  // namespace infini::rendezvous::wire
