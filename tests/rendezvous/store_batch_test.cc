// Version 4's batched requests (wire_protocol.h, kBatch), spoken by hand:
// each is answered by its tag, a Get that waits holds up nothing behind it,
// the answers of one turn leave together, and a connection of version 3, or a
// relay's, cannot batch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "infini/rendezvous/tcp_store.h"
#include "raw_store_socket.h"
#include "request_codec.h"
#include "store_test_util.h"
#include "wire_protocol.h"

namespace infini::rendezvous {
namespace {

using std::chrono::milliseconds;
using testing::ConnectTo;
using testing::Eventually;
using testing::RawStoreSocket;
using testing::StartLocalServer;
using wire::MessageType;

wire::Request Get(const std::string& key, int64_t timeout_ms) {
  wire::Request request;
  request.type = MessageType::kGet;
  request.keys = {key};
  request.number = timeout_ms;
  return request;
}

wire::Request Set(const std::string& key, const std::string& value) {
  wire::Request request;
  request.type = MessageType::kSet;
  request.keys = {key};
  request.value = value;
  return request;
}

std::string Batch(const std::vector<std::pair<uint64_t, wire::Request>>& requests) {
  wire::BatchWriter writer;
  for (const auto& [tag, request] : requests) writer.Add(tag, wire::EncodeRequest(request));
  return writer.Finish();
}

// One kBatchReply frame body: the batches it says were handled, and its
// replies by tag.
struct BatchReply {
  uint32_t batches_done = 0;
  std::map<uint64_t, wire::Reply> replies;
};
BatchReply Replies(const std::string& body) {
  std::vector<wire::TaggedReply> tagged;
  BatchReply reply;
  EXPECT_EQ(wire::DecodeBatchReply(body, &reply.batches_done, &tagged), "");
  for (const wire::TaggedReply& each : tagged) {
    EXPECT_EQ(wire::DecodeReply(each.body, &reply.replies[each.tag]), "");
  }
  return reply;
}

uint32_t HelloOkVersion(const std::string& body) {
  wire::BodyReader reader(body);
  uint8_t type = 0;
  uint32_t magic = 0;
  uint32_t version = 0;
  EXPECT_TRUE(reader.U8(&type) && reader.U32(&magic) && reader.U32(&version));
  EXPECT_EQ(static_cast<MessageType>(type), MessageType::kHelloOk);
  return version;
}

TEST(StoreBatchTest, EachRequestIsAnsweredByItsTagAndAWaitingGetHoldsUpNothing) {
  auto server = StartLocalServer();
  RawStoreSocket raw(server->port());
  ASSERT_TRUE(raw.Greet());
  wire::Request add;
  add.type = MessageType::kAdd;
  add.keys = {"n"};
  add.number = 2;
  ASSERT_TRUE(raw.Send(
      Batch({{7, Get("late", 5000)}, {8, Set("k", "v")}, {9, Get("k", 5000)}, {10, add}})));
  // What could be answered at once, in one frame that says the batch was
  // handled; the Get of "late" waits.
  BatchReply frame = Replies(raw.ReadFrame());
  EXPECT_EQ(frame.batches_done, 1u);
  std::map<uint64_t, wire::Reply>& replies = frame.replies;
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[8].type, MessageType::kOk);
  ASSERT_EQ(replies[9].type, MessageType::kValue);
  EXPECT_EQ(*replies[9].value, "v");
  EXPECT_EQ(replies[10].integer, 2);
  EXPECT_EQ(server->num_waiters(), 1u);

  // The connection still takes batches while one of its Gets waits; each
  // waiter keeps its own deadline. A batch with nothing to answer at once is
  // told handled in an empty frame.
  ASSERT_TRUE(raw.Send(Batch({{11, Get("never", 50)}})));
  frame = Replies(raw.ReadFrame());
  EXPECT_EQ(frame.batches_done, 1u);
  EXPECT_TRUE(replies.empty());
  frame = Replies(raw.ReadFrame());
  EXPECT_EQ(frame.batches_done, 0u);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[11].type, MessageType::kTimeout);

  ConnectTo(*server)->Set("late", "now");
  frame = Replies(raw.ReadFrame());
  ASSERT_EQ(replies.size(), 1u);
  ASSERT_EQ(replies[7].type, MessageType::kValue);
  EXPECT_EQ(*replies[7].value, "now");
  EXPECT_EQ(server->num_waiters(), 0u);
}

// This process's resident bytes (the server runs in it).
size_t ResidentBytes() {
  long pages = 0;
  long resident = 0;
  if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(statm);
  }
  return static_cast<size_t>(resident) * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// One batch of 1,536 Gets of a 1 MiB value from a client that never reads:
// its replies share the stored value (before, each copied it into the reply
// frames, 1.5 GiB held until the client closed, charged to the budget), and
// another client's 1 MiB Set is admitted at once (before: it waited for
// budget that the unread replies held, and timed out).
TEST(StoreBatchTest, GetsOfALargeValueShareItAndAnUnreadBatchHoldsUpNoOtherClient) {
  auto server = StartLocalServer();
  const std::string value(size_t{1} << 20, 'v');
  ConnectTo(*server)->Set("big", value);
  const size_t resident_before = ResidentBytes();
  RawStoreSocket reader_that_never_reads(server->port());
  ASSERT_TRUE(reader_that_never_reads.Greet());
  std::vector<std::pair<uint64_t, wire::Request>> gets;
  for (uint64_t tag = 0; tag < 1536; ++tag) gets.emplace_back(tag, Get("big", 0));
  ASSERT_TRUE(reader_that_never_reads.Send(Batch(gets)));
  // Handled: its replies wait to be written (values counted, not copied).
  ASSERT_TRUE(Eventually([&] { return server->buffered_bytes() > (size_t{1} << 30); },
                         milliseconds(20000)));
  EXPECT_LT(server->charged_bytes(), size_t{1} << 20);
  const auto start = std::chrono::steady_clock::now();
  ConnectTo(*server, milliseconds(3000))->Set("other", value);
  EXPECT_LT(testing::ElapsedSince(start), milliseconds(1000));
#ifndef INFINI_STORE_TEST_SANITIZED
  const size_t resident_after = ResidentBytes();
  EXPECT_LT(resident_after, resident_before + (size_t{64} << 20))
      << "grew from " << resident_before << " to " << resident_after << " bytes";
#else
  (void)resident_before;  // shadow memory and quarantine: no bound
#endif
}

TEST(StoreBatchTest, WaitersOfABatchAreForgottenWhenTheirConnectionCloses) {
  auto server = StartLocalServer();
  {
    RawStoreSocket raw(server->port());
    ASSERT_TRUE(raw.Greet());
    ASSERT_TRUE(raw.Send(Batch({{1, Get("a", 60000)}, {2, Get("b", 60000)}})));
    ASSERT_TRUE(Eventually([&] { return server->num_waiters() == 2; }));
  }
  ASSERT_TRUE(Eventually([&] { return server->num_waiters() == 0; }));
  ConnectTo(*server)->Set("a", "nobody waits");
}

TEST(StoreBatchTest, AConnectionOfVersion3Or4IsRefusedNamingBothVersions) {
  auto server = StartLocalServer();
  for (const uint32_t version : {3u, 4u}) {
    RawStoreSocket raw(server->port());
    ASSERT_TRUE(raw.Send(testing::HelloFrame(wire::kMagic, version)));
    const std::string text = testing::ErrorFrameText(raw.ReadUntilClosed());
    EXPECT_TRUE(raw.closed());
    EXPECT_NE(text.find("store protocol version " + std::to_string(version) +
                        " is not supported; this server speaks version " +
                        std::to_string(wire::kVersion) + " only"),
              std::string::npos)
        << text;
  }
}

TEST(StoreBatchTest, ARelaySpeaksTheOneVersionAndRefusesABatchSayingSo) {
  auto upstream = StartLocalServer();
  auto relay = testing::StartRelayOf(upstream->port(), milliseconds(1000));
  RawStoreSocket raw(relay->port());
  ASSERT_TRUE(raw.Send(testing::HelloFrame()));
  EXPECT_EQ(HelloOkVersion(raw.ReadFrame()), wire::kVersion);
  ASSERT_TRUE(raw.Send(Batch({{1, Set("k", "v")}})));
  const std::string text = testing::ErrorFrameText(raw.ReadUntilClosed());
  EXPECT_NE(text.find("a relay takes no batches"), std::string::npos) << text;
  EXPECT_FALSE(ConnectTo(*upstream)->Check({"k"}));
}

TEST(StoreBatchTest, AMalformedBatchClosesOnlyItsConnection) {
  TcpStoreServerOptions options;
  options.max_keys_per_request = 2;
  auto server = TcpStoreServer::Start(options);
  auto bystander = ConnectTo(*server);
  RawStoreSocket raw(server->port());
  ASSERT_TRUE(raw.Greet());
  ASSERT_TRUE(raw.Send(Batch({{1, Set("a", "")}, {2, Set("b", "")}, {3, Set("c", "")}})));
  const std::string refused = raw.ReadUntilClosed();
  EXPECT_TRUE(raw.closed());
  EXPECT_NE(testing::ErrorFrameText(refused).find("max_keys_per_request is 2"), std::string::npos)
      << testing::ErrorFrameText(refused);
  EXPECT_FALSE(bystander->Check({"a"}));  // nothing of it was applied
  bystander->Set("still", "serving");
}

}  // namespace
}  // namespace infini::rendezvous
