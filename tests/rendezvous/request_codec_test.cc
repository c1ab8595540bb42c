// Framing and request decoding: what a client announces is never allocated,
// and every malformed body is refused with a reason.
#include "request_codec.h"

#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace infini::rendezvous::wire
