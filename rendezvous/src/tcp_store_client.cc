// The store client: one blocking TCP connection, poll() for every deadline
// (the transport: client_connection.h); here the hello, the retries of
// Connect, and the requests and their replies.
//
// Get and Wait carry their timeout to the server, which answers kTimeout and
// keeps the connection usable. The client's own deadline (the server's plus a
// grace period) only guards against a server that stopped answering; hitting
// it, like any I/O error, breaks the connection for good. The one exception:
// a connection that the server closed while it was idle (nothing was sent on
// it since the last reply) is made again before the next request.

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "client_connection.h"
#include "hello_auth.h"
#include "infini/common/launch_env.h"
#include "infini/common/one_line.h"
#include "infini/rendezvous/endpoint.h"
#include "infini/rendezvous/run_token.h"
#include "infini/rendezvous/tcp_store.h"
#include "wire_protocol.h"

namespace infini::rendezvous {
namespace {

using std::chrono::milliseconds;
using store_client::Clamp;
using store_client::Clock;
using store_client::Connection;
using store_client::DeadlineAfter;
using store_client::IoFailure;
using store_client::kLongestTimeout;
using store_client::TryConnect;
using wire::BodyReader;
using wire::FrameWriter;
using wire::MessageType;

// How long past a Get/Wait timeout the client waits for the server's own
// timeout reply before it declares the server unresponsive.
constexpr milliseconds kServerReplyGrace{std::chrono::seconds(10)};
// The shortest connection attempt while Connect reports its wait: one SYN
// and its answer, on any network a store is used over.
constexpr milliseconds kMinAttempt{std::chrono::seconds(1)};

// "0.3s", "5s", "300s".
std::string Seconds(milliseconds duration) {
  const int64_t ms = duration.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  char text[32];
  std::snprintf(text, sizeof(text), "%.3gs", static_cast<double>(ms) / 1000.0);
  return text;
}

std::string QuotedList(const std::vector<std::string>& keys) {
  std::string text;
  for (const std::string& key : keys) {
    if (!text.empty()) text += ", ";
    text += "'" + OneLine(key) + "'";
  }
  return text;
}

// The connection ended during the hello without a word from the store (one
// out of descriptors closes what it cannot serve; a crowded one closes
// connections to make room): Connect tries again while its time lasts.
class HelloCut : public StoreError {
 public:
  using StoreError::StoreError;
};

class TcpStoreClientImpl final : public TcpStoreClient {
 public:
  TcpStoreClientImpl(std::string host, uint16_t port, std::string token)
      : host_(std::move(host)),
        port_(port),
        token_(std::move(token)),
        endpoint_(OneLine(FormatEndpoint({host_, port_}))) {}

  // The greeted connection, for a caller that drives it itself; this client
  // is spent.
  store_client::GreetedConnection TakeConnection() {
    std::lock_guard lock(mutex_);
    return {.connection = std::move(connection_),
            .max_message_bytes = max_message_bytes_,
            .max_keys_per_request = max_keys_per_request_};
  }

  // Connects (retrying until `connect_timeout` passes, since the server may
  // start after its clients; once only when `retry` is false) and exchanges
  // hellos, telling `progress` while it retries. Throws StoreError naming
  // host:port.
  void Open(milliseconds connect_timeout, bool retry = true, const ConnectProgress& progress = {}) {
    const Clock::time_point start = Clock::now();
    const auto since = std::chrono::system_clock::now();
    const Clock::time_point deadline = DeadlineAfter(connect_timeout);
    const bool reporting = retry && progress.report;
    Clock::time_point next_report = start + Clamp(progress.first);
    milliseconds backoff{10};
    std::string failure = "timed out";
    for (;;) {
      // While reporting, an attempt that hears nothing (dropped packets)
      // ends by the next report, and the next attempt starts after it.
      const Clock::time_point attempt_deadline =
          reporting ? std::min(deadline, std::max(next_report, Clock::now() + kMinAttempt))
                    : deadline;
      const int fd = TryConnect(host_, port_, attempt_deadline, &failure);
      if (fd >= 0) {
        // Clear O_NONBLOCK: the connection uses blocking calls gated by poll().
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        connection_ = std::make_unique<Connection>(fd);
        broken_.clear();
        // A server that accepted is given at least a few seconds to say hello.
        try {
          Greet(std::max(deadline, Clock::now() + std::chrono::seconds(5)));
          return;
        } catch (const HelloCut& cut) {
          failure = cut.what();  // tried again while time is left
        }
      }
      const Clock::time_point now = Clock::now();
      const auto left = deadline - now;
      if (!retry || left <= Clock::duration::zero()) break;
      if (reporting && now >= next_report) {
        progress.report({.endpoint = endpoint_,
                         .since = since,
                         .waited = std::chrono::duration_cast<milliseconds>(now - start),
                         .left = std::chrono::duration_cast<milliseconds>(left),
                         .last_failure = failure});
        const milliseconds every = std::clamp(progress.every, milliseconds(1), kLongestTimeout);
        while (next_report <= now) next_report += every;
      }
      Clock::duration pause = std::min<Clock::duration>(backoff, left);
      if (reporting) pause = std::max<Clock::duration>(std::min(pause, next_report - now), {});
      std::this_thread::sleep_for(pause);
      backoff = std::min(backoff * 2, milliseconds(500));
    }
    throw StoreError("could not connect to store at " + endpoint_ +
                     (retry ? " after " + Seconds(connect_timeout) : std::string()) + ": " +
                     failure);
  }

  void Set(const std::string& key, const std::string& value) override {
    const std::string reply = Call(FrameWriter(MessageType::kSet).Str(key).Str(value).Finish(),
                                   DefaultDeadline(), "setting key '" + OneLine(key) + "'");
    Expect(reply, MessageType::kOk, "setting key '" + OneLine(key) + "'");
  }

  std::string Get(const std::string& key) override {
    const milliseconds timeout = Clamp(timeout_);
    const std::string doing = "getting key '" + OneLine(key) + "'";
    const std::string reply =
        Call(FrameWriter(MessageType::kGet).Str(key).I64(timeout.count()).Finish(),
             DeadlineAfter(timeout + kServerReplyGrace), doing);
    if (TypeOf(reply) == MessageType::kTimeout) {
      throw StoreTimeoutError("timed out after " + Seconds(timeout) + " waiting for key '" +
                              OneLine(key) + "' in the store at " + endpoint_);
    }
    return ReadString(reply, MessageType::kValue, doing);
  }

  int64_t Add(const std::string& key, int64_t delta) override {
    const std::string doing = "adding to key '" + OneLine(key) + "'";
    const std::string reply =
        Call(FrameWriter(MessageType::kAdd).Str(key).I64(delta).Finish(), DefaultDeadline(), doing);
    return ReadInteger(reply, doing);
  }

  std::string CompareSet(const std::string& key, const std::string& expected,
                         const std::string& desired) override {
    const std::string doing = "compare-setting key '" + OneLine(key) + "'";
    const std::string reply =
        Call(FrameWriter(MessageType::kCompareSet).Str(key).Str(expected).Str(desired).Finish(),
             DefaultDeadline(), doing);
    return ReadString(reply, MessageType::kValue, doing);
  }

  bool DeleteKey(const std::string& key) override {
    const std::string doing = "deleting key '" + OneLine(key) + "'";
    const std::string reply =
        Call(FrameWriter(MessageType::kDelete).Str(key).Finish(), DefaultDeadline(), doing);
    return ReadBool(reply, doing);
  }

  bool Check(const std::vector<std::string>& keys) override {
    if (keys.empty()) return true;
    const std::string doing = "checking keys " + QuotedList(keys);
    CheckKeyCount(keys, doing);
    const std::string reply =
        Call(KeysFrame(MessageType::kCheck, keys).Finish(), DefaultDeadline(), doing);
    return ReadBool(reply, doing);
  }

  void Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    if (keys.empty()) return;
    timeout = Clamp(timeout);
    const std::string doing = "waiting for keys " + QuotedList(keys);
    CheckKeyCount(keys, doing);
    const std::string reply =
        Call(KeysFrame(MessageType::kWait, keys).I64(timeout.count()).Finish(),
             DeadlineAfter(timeout + kServerReplyGrace), doing);
    if (TypeOf(reply) == MessageType::kTimeout) {
      throw StoreTimeoutError("timed out after " + Seconds(timeout) + " waiting for keys " +
                              QuotedList(keys) + " in the store at " + endpoint_);
    }
    Expect(reply, MessageType::kOk, doing);
  }

  void SetOnClose(const std::string& key, const std::string& value) override {
    const std::string doing = "registering on-close key '" + OneLine(key) + "'";
    const std::string reply =
        Call(FrameWriter(MessageType::kSetOnClose).Str(key).Str(value).Finish(), DefaultDeadline(),
             doing);
    Expect(reply, MessageType::kOk, doing);
    std::lock_guard lock(mutex_);
    on_close_keys_.insert(key);
  }

  void CancelOnClose(const std::string& key) override {
    const std::string doing = "cancelling on-close key '" + OneLine(key) + "'";
    const std::string reply =
        Call(FrameWriter(MessageType::kCancelOnClose).Str(key).Finish(), DefaultDeadline(), doing);
    Expect(reply, MessageType::kOk, doing);
    std::lock_guard lock(mutex_);
    on_close_keys_.erase(key);
  }

  int64_t NumKeys() override {
    const std::string reply =
        Call(FrameWriter(MessageType::kNumKeys).Finish(), DefaultDeadline(), "counting keys");
    return ReadInteger(reply, "counting keys");
  }

 private:
  // Exchanges hellos. With a token, both sides prove it: the server first (a
  // server that cannot, or that does not ask, is not this run's store), then
  // this client. Throws StoreError when the peer is not our store or refuses us.
  void Greet(Clock::time_point deadline) {
    // With a token, the nonce carries its ticket: a crowded store never
    // closes this connection to make room for strangers.
    const std::string client_nonce = auth::NonceWithTicket(token_);
    std::string reply = Exchange(FrameWriter(MessageType::kHello)
                                     .U32(wire::kMagic)
                                     .U32(wire::kVersion)
                                     .Str(client_nonce)
                                     .Finish(),
                                 deadline);
    if (TypeOf(reply) == MessageType::kChallenge) {
      reply = AnswerChallenge(reply, client_nonce, deadline);
    } else if (TypeOf(reply) == MessageType::kHelloOk && !token_.empty()) {
      Break("the server did not ask for the run token");
      throw StoreHandshakeError(
          "store at " + endpoint_ + " does not ask for the run token, but this client holds one (" +
          env::kRunToken + "): it is not this run's store (another program took the port?)");
    }
    BodyReader reader(reply);
    uint8_t type = 0;
    uint32_t magic = 0;
    uint32_t version = 0;
    uint64_t max_message_bytes = 0;
    uint32_t max_keys = 0;
    if (!reader.U8(&type) || static_cast<MessageType>(type) != MessageType::kHelloOk ||
        !reader.U32(&magic) || magic != wire::kMagic || !reader.U32(&version) ||
        !reader.U64(&max_message_bytes) || !reader.U32(&max_keys)) {
      if (static_cast<MessageType>(type) == MessageType::kError)
        ThrowRefused(reply, "greeting it", /*handshake=*/true);
      Break("unexpected hello reply");
      throw StoreHandshakeError("store at " + endpoint_ +
                                " is not an InfiniCCL store: unexpected hello reply");
    }
    max_message_bytes_ = static_cast<size_t>(
        std::min<uint64_t>(max_message_bytes, std::numeric_limits<uint32_t>::max()));
    max_keys_per_request_ = max_keys;
    if (version != wire::kVersion) {
      Break("another protocol version");
      throw StoreHandshakeError("store at " + endpoint_ + " speaks store protocol version " +
                                std::to_string(version) + " and this client version " +
                                std::to_string(wire::kVersion) +
                                " only (they come from different builds)");
    }
  }

  // Checks the server's proof in its challenge, then sends this client's;
  // returns the server's answer.
  std::string AnswerChallenge(const std::string& challenge, const std::string& client_nonce,
                              Clock::time_point deadline) {
    BodyReader reader(challenge);
    uint8_t type = 0;
    std::string server_nonce;
    std::string server_proof;
    if (!reader.U8(&type) || !reader.Str(&server_nonce) || !reader.Str(&server_proof) ||
        !reader.AtEnd() || server_nonce.size() != wire::kNonceBytes ||
        server_proof.size() != wire::kProofBytes) {
      Break("malformed challenge");
      throw StoreHandshakeError("store at " + endpoint_ + " sent a malformed challenge");
    }
    if (token_.empty()) {
      Break("no run token");
      throw StoreHandshakeError(
          "store at " + endpoint_ +
          " refused the run token: the store requires one and this client has "
          "none; set " +
          env::kRunToken + " to the run's token");
    }
    if (!auth::ProofMatches(auth::Side::kServer, token_, client_nonce, server_nonce,
                            server_proof)) {
      Break("the server's proof does not match the run token");
      throw StoreHandshakeError(
          "store at " + endpoint_ +
          " does not hold this client's run token (its proof does not match " + env::kRunToken +
          "): it is another run's store, or " + env::kRunToken + " is another run's; set " +
          env::kRunToken + " to the token of the run that started this store");
    }
    std::string reply =
        Exchange(FrameWriter(MessageType::kProof)
                     .Str(auth::ProofFor(auth::Side::kClient, token_, client_nonce, server_nonce))
                     .Finish(),
                 deadline);
    if (TypeOf(reply) == MessageType::kError) {
      BodyReader refusal(reply);
      std::string message;
      refusal.U8(&type);
      if (!refusal.Str(&message)) message = "(no reason given)";
      Break("run token refused");
      throw StoreHandshakeError("store at " + endpoint_ + " refused the run token: " + message +
                                "; set " + env::kRunToken +
                                " to the token of the run that started this store");
    }
    return reply;
  }

  // One request-reply of the hello (before the server's limits are known).
  std::string Exchange(const std::string& request, Clock::time_point deadline) {
    try {
      connection_->SendAll(request, deadline);
      return connection_->ReceiveFrame(deadline, "it did not answer the hello in time",
                                       wire::kMaxHelloReplyBytes);
    } catch (const IoFailure& failure) {
      Break(failure.what);
      throw HelloCut("store at " + endpoint_ + " failed while greeting it: " + failure.what);
    }
  }

  void CheckKeyCount(const std::vector<std::string>& keys, const std::string& doing) {
    std::lock_guard lock(mutex_);
    if (keys.size() <= max_keys_per_request_) return;
    throw StoreError(
        "store at " + endpoint_ + " refused " + doing + ": " + std::to_string(keys.size()) +
        " keys and the store's max_keys_per_request is " + std::to_string(max_keys_per_request_));
  }

  static FrameWriter KeysFrame(MessageType type, const std::vector<std::string>& keys) {
    FrameWriter frame(type);
    frame.U32(static_cast<uint32_t>(keys.size()));
    for (const std::string& key : keys) frame.Str(key);
    return frame;
  }

  // For requests that the server answers at once: the store's timeout is the
  // longest a live server may take.
  Clock::time_point DefaultDeadline() const { return DeadlineAfter(timeout_); }

  // Sends one request and returns its reply body. Any transport failure breaks
  // the connection and throws StoreError.
  std::string Call(const std::string& request, Clock::time_point deadline,
                   const std::string& doing) {
    std::lock_guard lock(mutex_);
    const size_t body_bytes = request.size() - wire::kFrameHeaderBytes;
    if (body_bytes > max_message_bytes_) {
      // Refused here, before it could cost the connection.
      throw StoreError("store at " + endpoint_ + " refused " + doing + ": the request has " +
                       std::to_string(body_bytes) + " bytes and the store's max_message_bytes is " +
                       std::to_string(max_message_bytes_));
    }
    if (!broken_.empty()) {
      throw StoreError("store at " + endpoint_ + " cannot be used for " + doing +
                       ": an earlier call broke the connection (" + broken_ + ")");
    }
    if (connection_->ClosedByPeer() && !on_close_keys_.empty()) {
      // The server set them as it closed it (it never closes such a
      // connection for idleness): a new connection would hide that.
      Break("the store closed the connection, which set its on-close keys");
      throw StoreError("store at " + endpoint_ + " cannot be used for " + doing + ": " + broken_);
    }
    if (connection_->ClosedByPeer()) {
      // Closed while idle (the server's idle_timeout): nothing of ours was
      // lost, so a new connection may carry the request. A server that is
      // gone refuses it at once.
      try {
        Open(timeout_, /*retry=*/false);
      } catch (const StoreError& error) {
        Break("the store closed the connection");
        throw StoreError("store at " + endpoint_ + " failed while " + doing +
                         ": the store closed the connection and does not accept a new one (" +
                         error.what() + "; is the store server still running?)");
      }
    }
    try {
      connection_->SendAll(request, deadline);
      return connection_->ReceiveFrame(deadline, "it did not answer in time",
                                       max_message_bytes_ + wire::kMessageOverheadBytes);
    } catch (const IoFailure& failure) {
      Break(failure.what);
      throw StoreError("store at " + endpoint_ + " failed while " + doing + ": " + failure.what +
                       (failure.what.find("closed") != std::string::npos
                            ? " (is the store server still running?)"
                            : ""));
    }
  }

  void Break(const std::string& reason) { broken_ = reason.empty() ? "broken" : reason; }

  static MessageType TypeOf(std::string_view reply) { return static_cast<MessageType>(reply[0]); }

  [[noreturn]] void ThrowRefused(const std::string& reply, const std::string& doing,
                                 bool handshake = false) {
    BodyReader reader(reply);
    uint8_t type = 0;
    std::string message;
    reader.U8(&type);
    if (!reader.Str(&message)) message = "(no reason given)";
    const std::string what = "store at " + endpoint_ + " refused " + doing + ": " + message;
    if (handshake) throw StoreHandshakeError(what);
    throw StoreError(what);
  }

  // Checks the reply type; a kError reply becomes StoreError with its text.
  BodyReader Expect(const std::string& reply, MessageType expected, const std::string& doing) {
    if (TypeOf(reply) == MessageType::kError) ThrowRefused(reply, doing);
    if (TypeOf(reply) != expected) ThrowMalformed(doing);
    BodyReader reader(reply);
    uint8_t type = 0;
    reader.U8(&type);
    return reader;
  }

  [[noreturn]] void ThrowMalformed(const std::string& doing) {
    {
      std::lock_guard lock(mutex_);
      Break("it sent an unexpected reply");
    }
    throw StoreError("store at " + endpoint_ + " sent an unexpected reply while " + doing);
  }

  std::string ReadString(const std::string& reply, MessageType expected, const std::string& doing) {
    BodyReader reader = Expect(reply, expected, doing);
    std::string value;
    if (!reader.Str(&value) || !reader.AtEnd()) ThrowMalformed(doing);
    return value;
  }

  int64_t ReadInteger(const std::string& reply, const std::string& doing) {
    BodyReader reader = Expect(reply, MessageType::kInteger, doing);
    int64_t value = 0;
    if (!reader.I64(&value) || !reader.AtEnd()) ThrowMalformed(doing);
    return value;
  }

  bool ReadBool(const std::string& reply, const std::string& doing) {
    BodyReader reader = Expect(reply, MessageType::kBool, doing);
    uint8_t value = 0;
    if (!reader.U8(&value) || !reader.AtEnd()) ThrowMalformed(doing);
    return value != 0;
  }

  const std::string host_;
  const uint16_t port_;
  const std::string token_;
  const std::string endpoint_;  // "host:port", for messages
  std::mutex mutex_;
  std::unique_ptr<Connection> connection_;  // guarded by mutex_
  std::string broken_;                      // why the connection is unusable; guarded by mutex_
  // The server's limits (from its hello); guarded by mutex_.
  size_t max_message_bytes_ = wire::kMaxHelloReplyBytes;
  size_t max_keys_per_request_ = 0;
  std::set<std::string> on_close_keys_;  // registered, not cancelled; guarded by mutex_
};

}  // namespace

namespace store_client {

GreetedConnection ConnectGreeted(const std::string& host, uint16_t port,
                                 milliseconds connect_timeout, const std::string& token,
                                 bool retry) {
  TcpStoreClientImpl client(host, port, token);
  client.Open(Clamp(connect_timeout), retry);
  return client.TakeConnection();
}

}  // namespace store_client

std::unique_ptr<TcpStoreClient> TcpStoreClient::Connect(const std::string& host, uint16_t port,
                                                        milliseconds connect_timeout,
                                                        const std::string& token,
                                                        const ConnectProgress& progress) {
  auto client = std::make_unique<TcpStoreClientImpl>(host, port, token);
  client->Open(Clamp(connect_timeout), /*retry=*/true, progress);
  return client;
}

}  // namespace infini::rendezvous
