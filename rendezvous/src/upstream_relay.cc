#include "upstream_relay.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client_connection.h"
#include "infini/common/one_line.h"
#include "infini/rendezvous/endpoint.h"
#include "wire_protocol.h"

namespace infini::rendezvous::store_server {
namespace {

using Clock = std::chrono::steady_clock;
using wire::MessageType;
using wire::Reply;

// How long past a watch's timeout the upstream may take to answer it, and
// how long it may take for anything else, before the relay takes it as
// unresponsive (the store client's own bounds).
constexpr std::chrono::milliseconds kReplyGrace{std::chrono::seconds(10)};
constexpr std::chrono::milliseconds kForwardDeadline = Store::kDefaultTimeout;
constexpr size_t kReadChunkBytes = size_t{64} << 10;
// A request's bytes in a batch besides its keys and values: type, lengths,
// integers.
constexpr size_t kRequestOverheadBytes = 64;

Reply ErrorReply(std::string text) {
  Reply reply;
  reply.type = MessageType::kError;
  reply.error = std::move(text);
  return reply;
}

const char* RequestName(MessageType type) {
  switch (type) {
    case MessageType::kSet:
      return "set";
    case MessageType::kAdd:
      return "add";
    case MessageType::kCompareSet:
      return "compare_set";
    case MessageType::kDelete:
      return "delete";
    case MessageType::kCheck:
      return "check";
    case MessageType::kNumKeys:
      return "num_keys";
    case MessageType::kSetOnClose:
      return "set_on_close";
    case MessageType::kCancelOnClose:
      return "cancel_on_close";
    default:
      return "other";
  }
}

bool IsWrite(MessageType type) {
  return type == MessageType::kSet || type == MessageType::kAdd ||
         type == MessageType::kCompareSet || type == MessageType::kDelete;
}

size_t RequestBytes(const wire::Request& request) {
  size_t bytes = kRequestOverheadBytes + request.value.size() + request.expected.size();
  for (const std::string& key : request.keys) bytes += key.size() + 4;
  return bytes;
}

}  // namespace

struct UpstreamRelay::Job {
  bool watch = false;
  ClientId client = 0;
  wire::Request request;  // a watch: its key, and the timeout in `number`
};

// The two ways upstream, each its own connection and thread: small
// requests (at most upstream.small_request_bytes: watches, counters, Gets)
// and the others. A small request then never follows a large value's bytes
// on a connection, nor waits for the upstream to handle one.
enum Lane : int { kSmallLane = 0, kLargeLane = 1, kLanes = 2 };

struct UpstreamRelay::State {
  RelayUpstream upstream;
  std::function<void()> wake;  // empty once the relay is gone
  Observer observe;
  int wake_fd[kLanes] = {-1, -1};  // eventfds: new work for the lane, or Stop

  mutable std::mutex mutex;
  std::deque<Job> queued[kLanes];  // not yet sent
  std::deque<UpstreamResult> results;
  bool stopping = false;
  RelayCounts counts;

  ~State() {
    for (const int fd : wake_fd) {
      if (fd >= 0) ::close(fd);
    }
  }
  void Signal(Lane lane) const {
    const uint64_t one = 1;
    if (::write(wake_fd[lane], &one, sizeof(one)) < 0) {
      // The counter is full: the thread has a wake-up pending anyway.
    }
  }
};

namespace {

// One lane's thread: its upstream connection, the batches in flight on it,
// and the loop that polls the socket and the wake-up.
class UpstreamLink {
 public:
  UpstreamLink(std::shared_ptr<UpstreamRelay::State> state, Lane lane)
      : state_(std::move(state)),
        lane_(lane),
        endpoint_(OneLine(FormatEndpoint({state_->upstream.host, state_->upstream.port}))) {}

  void Run() {
    for (;;) {
      std::vector<UpstreamRelay::Job> batch;
      bool connect = false;
      {
        std::lock_guard lock(state_->mutex);
        if (state_->stopping) return;
        if (!connection_ && !state_->queued[lane_].empty()) {
          connect = true;
        } else if (connection_ && batches_in_flight_ == 0 && output_.empty()) {
          batch = TakeBatch();
        }
      }
      if (connect) {
        Connect();
        continue;
      }
      if (!batch.empty()) Send(std::move(batch));
      PollOnce();
    }
  }

 private:
  struct Pending {
    UpstreamRelay::Job job;
    Clock::time_point deadline;
  };

  // Under the state's lock: the lane's queued jobs that fit one frame,
  // counted and observed (after Stop() returns, no observer is called).
  std::vector<UpstreamRelay::Job> TakeBatch() {
    std::vector<UpstreamRelay::Job> batch;
    size_t bytes = 1 + 4;
    size_t large_bytes = 0;
    const bool large = lane_ == kLargeLane;
    std::deque<UpstreamRelay::Job>& queue = state_->queued[lane_];
    {
      while (!queue.empty() && batch.size() < max_requests_) {
        UpstreamRelay::Job& job = queue.front();
        const size_t job_bytes = RequestBytes(job.request) + wire::kBatchEntryOverheadBytes;
        if (!batch.empty() && bytes + job_bytes > max_message_bytes_) break;
        // Large requests share a batch up to large_bytes_per_frame; one
        // larger travels alone, so that small ones never wait for it twice.
        if (large && !batch.empty() &&
            large_bytes + job_bytes > state_->upstream.large_bytes_per_frame) {
          break;
        }
        bytes += job_bytes;
        if (large) large_bytes += job_bytes;
        RelayCounts& counts = state_->counts;
        ++counts.requests;
        if (job.watch) ++counts.watches;
        if (!job.watch && IsWrite(job.request.type)) ++counts.writes;
        if (state_->observe) {
          state_->observe(job.watch ? "watch" : RequestName(job.request.type),
                          job.request.keys.empty() ? std::string() : job.request.keys.front());
        }
        batch.push_back(std::move(job));
        queue.pop_front();
      }
    }
    return batch;
  }

  void Connect() {
    const RelayUpstream& upstream = state_->upstream;
    std::string failure;
    try {
      store_client::GreetedConnection greeted =
          store_client::ConnectGreeted(upstream.host, upstream.port, upstream.connect_timeout,
                                       upstream.token, /*retry=*/!ever_connected_);
      connection_ = std::move(greeted.connection);
      max_message_bytes_ = greeted.max_message_bytes;
      max_requests_ = std::max<size_t>(1, greeted.max_keys_per_request);
    } catch (const StoreError& error) {
      failure = error.what();
    }
    std::lock_guard lock(state_->mutex);
    if (connection_) {
      ++state_->counts.connections;
      ever_connected_ = true;
      return;
    }
    // Whatever waited for this connection fails, as a call on a lost store
    // does; work that comes later tries again.
    for (UpstreamRelay::Job& job : std::exchange(state_->queued[lane_], {})) {
      Deliver(Failed(job, failure));
    }
    Wake();
  }

  void Send(std::vector<UpstreamRelay::Job> batch) {
    wire::BatchWriter writer;
    const Clock::time_point now = Clock::now();
    std::vector<UpstreamResult> refused;
    for (UpstreamRelay::Job& job : batch) {
      const std::string body = wire::EncodeRequest(job.request);
      if (!job.watch) {
        // Its bytes are in the frame now; the job keeps what its reply needs.
        std::string().swap(job.request.value);
        std::string().swap(job.request.expected);
      }
      if (body.size() + wire::kBatchEntryOverheadBytes + 5 > max_message_bytes_) {
        refused.push_back(
            Result(job, ErrorReply("the request has " + std::to_string(body.size()) +
                                   " bytes and the run's store at " + endpoint_ +
                                   " takes at most " + std::to_string(max_message_bytes_))));
        continue;
      }
      const uint64_t tag = ++last_tag_;
      writer.Add(tag, body);
      if (!job.watch) output_clients_.push_back(job.client);
      const auto deadline =
          now + (job.watch ? std::chrono::milliseconds(job.request.number) + kReplyGrace
                           : kForwardDeadline);
      pending_.emplace(tag, Pending{std::move(job), deadline});
    }
    const bool sending = writer.count() > 0;
    if (sending) {
      output_ = writer.Finish();
      output_sent_ = 0;
      ++batches_in_flight_;
    }
    std::lock_guard lock(state_->mutex);
    if (sending) {
      ++state_->counts.messages;
      state_->counts.bytes += output_.size();
    }
    for (UpstreamResult& result : refused) Deliver(std::move(result));
    if (!refused.empty()) Wake();
  }

  void PollOnce() {
    pollfd fds[2] = {{.fd = state_->wake_fd[lane_], .events = POLLIN, .revents = 0},
                     {.fd = -1, .events = 0, .revents = 0}};
    nfds_t count = 1;
    if (connection_) {
      fds[1].fd = connection_->fd();
      fds[1].events = static_cast<short>(POLLIN | (output_.empty() ? 0 : POLLOUT));
      count = 2;
    }
    int timeout_ms = -1;
    if (!pending_.empty()) {
      Clock::time_point earliest = Clock::time_point::max();
      for (const auto& [tag, pending] : pending_) earliest = std::min(earliest, pending.deadline);
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(earliest - Clock::now());
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1'000'000));
    }
    if (::poll(fds, count, timeout_ms) < 0 && errno != EINTR) {
      Fail("polling failed: " + std::string(std::strerror(errno)));
      return;
    }
    if (fds[0].revents & POLLIN) {
      uint64_t signals = 0;
      if (::read(state_->wake_fd[lane_], &signals, sizeof(signals)) < 0) {
        // Nothing pending after all (another read took it).
      }
    }
    if (connection_ && fds[1].revents != 0) {
      if (!output_.empty() && !Flush()) return;
      if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) && !Receive()) return;
    }
    CheckDeadlines();
  }

  // Writes what the socket takes now; false when the connection failed.
  bool Flush() {
    while (output_sent_ < output_.size()) {
      const ssize_t sent = ::send(connection_->fd(), output_.data() + output_sent_,
                                  output_.size() - output_sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        Fail("sending failed: " + std::string(std::strerror(errno)));
        return false;
      }
      output_sent_ += static_cast<size_t>(sent);
    }
    std::string().swap(output_);
    output_sent_ = 0;
    if (!output_clients_.empty()) {
      std::lock_guard lock(state_->mutex);
      for (const ClientId client : std::exchange(output_clients_, {})) {
        UpstreamResult taken;
        taken.kind = UpstreamResult::Kind::kTaken;
        taken.client = client;
        Deliver(std::move(taken));
      }
      Wake();
    }
    return true;
  }

  // Reads what arrived and hands over every whole reply; false when the
  // connection failed or ended.
  bool Receive() {
    char chunk[kReadChunkBytes];
    size_t received_bytes = 0;
    for (;;) {
      const ssize_t received = ::recv(connection_->fd(), chunk, sizeof(chunk), MSG_DONTWAIT);
      if (received == 0) {
        if (pending_.empty()) {
          Disconnect();  // closed while idle (its idle_timeout): made again when needed
        } else {
          Fail("the store closed the connection (is the store server still running?)");
        }
        return false;
      }
      if (received < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        Fail("receiving failed: " + std::string(std::strerror(errno)));
        return false;
      }
      input_.Append(chunk, static_cast<size_t>(received));
      received_bytes += static_cast<size_t>(received);
      if (static_cast<size_t>(received) < sizeof(chunk)) break;
    }
    std::vector<UpstreamResult> results;
    std::string_view body;
    for (;;) {
      const auto status = input_.Next(max_message_bytes_ + wire::kMessageOverheadBytes, &body);
      if (status == wire::FrameParser::Status::kNeedMore) break;
      if (status == wire::FrameParser::Status::kTooLarge) {
        Fail("it sent a malformed reply (length " + std::to_string(input_.announced_body_bytes()) +
             ")");
        return false;
      }
      if (static_cast<MessageType>(body[0]) == MessageType::kError) {
        Reply refusal;
        wire::DecodeReply(body, &refusal);
        Fail("it refused the relay's batch: " + refusal.error);
        return false;
      }
      std::vector<wire::TaggedReply> replies;
      uint32_t batches_done = 0;
      if (const std::string error = wire::DecodeBatchReply(body, &batches_done, &replies);
          !error.empty() || batches_done > batches_in_flight_) {
        Fail("it sent " + (error.empty() ? "word of more batches than were sent" : error));
        return false;
      }
      batches_in_flight_ -= batches_done;
      for (wire::TaggedReply& tagged : replies) {
        const auto found = pending_.find(tagged.tag);
        Reply reply;
        if (found == pending_.end() || !wire::DecodeReply(tagged.body, &reply).empty()) {
          Fail("it sent a reply that answers no request of the relay");
          return false;
        }
        results.push_back(Result(found->second.job, std::move(reply)));
        pending_.erase(found);
      }
    }
    input_.Compact();
    std::lock_guard lock(state_->mutex);
    state_->counts.bytes += received_bytes;
    for (UpstreamResult& result : results) Deliver(std::move(result));
    if (!results.empty()) Wake();
    return true;
  }

  void CheckDeadlines() {
    const Clock::time_point now = Clock::now();
    for (const auto& [tag, pending] : pending_) {
      if (pending.deadline <= now) {
        Fail("it did not answer in time");
        return;
      }
    }
  }

  // The connection is lost: every request in flight is answered with why.
  void Fail(const std::string& what) {
    std::vector<UpstreamResult> results;
    for (auto& [tag, pending] : pending_) {
      results.push_back(Failed(pending.job, "store at " + endpoint_ + " failed: " + what));
    }
    pending_.clear();
    Disconnect();
    std::lock_guard lock(state_->mutex);
    for (UpstreamResult& result : results) Deliver(std::move(result));
    if (!results.empty()) Wake();
  }

  void Disconnect() {
    connection_.reset();
    input_.Clear();
    std::string().swap(output_);
    output_sent_ = 0;
    output_clients_.clear();  // their failure answers release them
    batches_in_flight_ = 0;
  }

  static UpstreamResult Result(const UpstreamRelay::Job& job, Reply reply) {
    UpstreamResult result;
    result.client = job.client;
    if (!job.watch) {
      result.kind = UpstreamResult::Kind::kReply;
      result.reply = std::move(reply);
      return result;
    }
    result.key = job.request.keys.front();
    switch (reply.type) {
      case MessageType::kValue:
        result.kind = UpstreamResult::Kind::kWatched;
        result.value = reply.value ? *reply.value : std::string();
        break;
      case MessageType::kTimeout:
        result.kind = UpstreamResult::Kind::kWatchTimeout;
        break;
      default:
        result.kind = UpstreamResult::Kind::kWatchFailed;
        result.reply = reply.type == MessageType::kError
                           ? std::move(reply)
                           : ErrorReply("the run's store answered a watch with reply type " +
                                        std::to_string(static_cast<int>(reply.type)));
        break;
    }
    return result;
  }

  static UpstreamResult Failed(const UpstreamRelay::Job& job, const std::string& what) {
    // A watch's error is kWatchFailed (Result), a forwarded request's its reply.
    return Result(job, ErrorReply("the node's relay could not reach the run's store: " + what));
  }

  // Under the state's lock.
  void Deliver(UpstreamResult result) {
    if (!state_->stopping) state_->results.push_back(std::move(result));
  }
  void Wake() {
    if (!state_->stopping && state_->wake) state_->wake();
  }

  std::shared_ptr<UpstreamRelay::State> state_;
  const Lane lane_;
  const std::string endpoint_;  // "host:port", for messages
  std::unique_ptr<store_client::Connection> connection_;
  bool ever_connected_ = false;  // then a lost upstream is tried once
  size_t max_message_bytes_ = wire::kMaxHelloReplyBytes;
  size_t max_requests_ = 1;
  wire::FrameParser input_;
  std::string output_;                    // the batch being written
  std::vector<ClientId> output_clients_;  // whose forwarded requests it carries
  size_t output_sent_ = 0;
  std::unordered_map<uint64_t, Pending> pending_;  // by tag: sent, not yet answered
  size_t batches_in_flight_ = 0;                   // sent, not yet told handled
  uint64_t last_tag_ = 0;
};

}  // namespace

UpstreamRelay::UpstreamRelay(RelayUpstream upstream, std::function<void()> wake, Observer observe)
    : state_(std::make_shared<State>()) {
  state_->upstream = std::move(upstream);
  state_->observe = std::move(observe);
  state_->wake = std::move(wake);
  for (int& fd : state_->wake_fd) {
    fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
      throw StoreError(std::string("cannot make the relay's wake-up descriptor: ") +
                       std::strerror(errno));
    }
  }
  for (const Lane lane : {kSmallLane, kLargeLane}) {
    std::thread([state = state_, lane] { UpstreamLink(state, lane).Run(); }).detach();
  }
}

UpstreamRelay::~UpstreamRelay() { Stop(); }

void UpstreamRelay::Stop() {
  std::lock_guard lock(state_->mutex);
  state_->stopping = true;
  state_->wake = nullptr;
  for (const Lane lane : {kSmallLane, kLargeLane}) {
    state_->queued[lane].clear();
    state_->Signal(lane);
  }
}

void UpstreamRelay::Forward(ClientId client, wire::Request request) {
  Submit({.watch = false, .client = client, .request = std::move(request)});
}

void UpstreamRelay::Watch(const std::string& key, std::chrono::milliseconds timeout) {
  wire::Request request;
  request.type = MessageType::kGet;
  request.keys = {key};
  request.number = std::min(timeout, state_->upstream.longest_watch).count();
  Submit({.watch = true, .client = 0, .request = std::move(request)});
}

void UpstreamRelay::Submit(Job job) {
  std::lock_guard lock(state_->mutex);
  if (state_->stopping) return;
  const Lane lane =
      RequestBytes(job.request) <= state_->upstream.small_request_bytes ? kSmallLane : kLargeLane;
  const bool idle = state_->queued[lane].empty();
  state_->queued[lane].push_back(std::move(job));
  // One wake-up per burst: the thread takes everything queued when it runs.
  if (idle) state_->Signal(lane);
}

std::deque<UpstreamResult> UpstreamRelay::TakeResults() {
  std::lock_guard lock(state_->mutex);
  return std::exchange(state_->results, {});
}

RelayCounts UpstreamRelay::counts() const {
  std::lock_guard lock(state_->mutex);
  RelayCounts counts = state_->counts;
  counts.queued = state_->queued[kSmallLane].size() + state_->queued[kLargeLane].size();
  return counts;
}

}  // namespace infini::rendezvous::store_server
