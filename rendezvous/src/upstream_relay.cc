#include "upstream_relay.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "infini/rendezvous/tcp_store.h"

namespace infini::rendezvous::store_server {
namespace {

using wire::MessageType;
using wire::Reply;

Reply Typed(MessageType type, int64_t integer = 0) {
  Reply reply;
  reply.type = type;
  reply.integer = integer;
  return reply;
}

Reply ErrorReply(std::string text) {
  Reply reply;
  reply.type = MessageType::kError;
  reply.error = std::move(text);
  return reply;
}

// One forwarded request on the upstream store, as the reply the relay's
// client gets. Get and Wait are watched, never forwarded.
Reply RunUpstream(Store& upstream, wire::Request& request) {
  const std::string& key = request.keys.empty() ? std::string() : request.keys.front();
  switch (request.type) {
    case MessageType::kSet:
      upstream.Set(key, request.value);
      return Typed(MessageType::kOk);
    case MessageType::kAdd:
      return Typed(MessageType::kInteger, upstream.Add(key, request.number));
    case MessageType::kCompareSet: {
      Reply reply = Typed(MessageType::kValue);
      reply.value = std::make_shared<const std::string>(
          upstream.CompareSet(key, request.expected, request.value));
      return reply;
    }
    case MessageType::kDelete:
      return Typed(MessageType::kBool, upstream.DeleteKey(key) ? 1 : 0);
    case MessageType::kCheck:
      return Typed(MessageType::kBool, upstream.Check(request.keys) ? 1 : 0);
    case MessageType::kNumKeys:
      if (auto* tcp = dynamic_cast<TcpStoreClient*>(&upstream)) {
        return Typed(MessageType::kInteger, tcp->NumKeys());
      }
      return ErrorReply("the relay's upstream store does not count its keys");
    default:
      return ErrorReply("request type " + std::to_string(static_cast<int>(request.type)) +
                        " is not forwarded upstream");
  }
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
    default:
      return "other";
  }
}

bool IsWrite(MessageType type) {
  return type == MessageType::kSet || type == MessageType::kAdd ||
         type == MessageType::kCompareSet || type == MessageType::kDelete;
}

}  // namespace

struct UpstreamRelay::Job {
  bool watch = false;
  ClientId client = 0;
  wire::Request request;  // a watch: its key, and the timeout in `number`
};

struct UpstreamRelay::State {
  std::function<std::unique_ptr<Store>()> connect;
  std::function<void()> wake;  // empty once the relay is gone
  Observer observe;

  std::mutex mutex;
  std::condition_variable work_arrived;
  std::deque<Job> jobs;
  std::deque<UpstreamResult> results;
  size_t workers = 0;
  size_t idle_workers = 0;
  bool stopping = false;
  RelayCounts counts;
};

UpstreamRelay::UpstreamRelay(std::function<std::unique_ptr<Store>()> connect,
                             std::function<void()> wake, Observer observe)
    : state_(std::make_shared<State>()) {
  state_->connect = std::move(connect);
  state_->observe = std::move(observe);
  state_->wake = std::move(wake);
}

UpstreamRelay::~UpstreamRelay() { Stop(); }

void UpstreamRelay::Stop() {
  std::lock_guard lock(state_->mutex);
  state_->stopping = true;
  state_->wake = nullptr;
  state_->jobs.clear();
  state_->work_arrived.notify_all();
}

void UpstreamRelay::Forward(ClientId client, wire::Request request) {
  Submit({.watch = false, .client = client, .request = std::move(request)});
}

void UpstreamRelay::Watch(const std::string& key, std::chrono::milliseconds timeout) {
  wire::Request request;
  request.type = MessageType::kGet;
  request.keys = {key};
  request.number = std::min(timeout, kLongestWatch).count();
  Submit({.watch = true, .client = 0, .request = std::move(request)});
}

void UpstreamRelay::Submit(Job job) {
  std::lock_guard lock(state_->mutex);
  if (state_->stopping) return;
  state_->jobs.push_back(std::move(job));
  if (state_->idle_workers > 0) {
    state_->work_arrived.notify_one();
    return;
  }
  if (state_->workers >= kMaxUpstreamConnections) return;  // the next free worker takes it
  ++state_->workers;
  std::thread(Work, state_).detach();
}

std::deque<UpstreamResult> UpstreamRelay::TakeResults() {
  std::lock_guard lock(state_->mutex);
  return std::exchange(state_->results, {});
}

RelayCounts UpstreamRelay::counts() const {
  std::lock_guard lock(state_->mutex);
  return state_->counts;
}

void UpstreamRelay::Work(std::shared_ptr<State> state) {
  std::unique_ptr<Store> upstream;
  std::unique_lock lock(state->mutex);
  while (true) {
    ++state->idle_workers;
    state->work_arrived.wait(lock, [&] { return state->stopping || !state->jobs.empty(); });
    --state->idle_workers;
    if (state->stopping) break;
    Job job = std::move(state->jobs.front());
    state->jobs.pop_front();
    ++state->counts.requests;
    if (job.watch) ++state->counts.watches;
    if (!job.watch && IsWrite(job.request.type)) ++state->counts.writes;
    // Under the lock: after Stop() returns, no observer is called.
    if (state->observe) {
      state->observe(job.watch ? "watch" : RequestName(job.request.type),
                     job.request.keys.empty() ? std::string() : job.request.keys.front());
    }
    lock.unlock();

    UpstreamResult result;
    result.client = job.client;
    if (job.watch) result.key = job.request.keys.front();
    try {
      if (!upstream) {
        upstream = state->connect();
        std::lock_guard counting(state->mutex);
        ++state->counts.connections;
      }
      if (job.watch) {
        upstream->set_timeout(std::chrono::milliseconds(job.request.number));
        result.kind = UpstreamResult::Kind::kWatched;
        result.value = upstream->Get(result.key);
      } else {
        result.kind = UpstreamResult::Kind::kReply;
        result.reply = RunUpstream(*upstream, job.request);
      }
    } catch (const StoreTimeoutError&) {
      result.kind = UpstreamResult::Kind::kWatchTimeout;
    } catch (const StoreError& error) {
      // Made again for the next job: the upstream may have been restarted.
      upstream.reset();
      result.kind = job.watch ? UpstreamResult::Kind::kWatchFailed : UpstreamResult::Kind::kReply;
      result.reply = ErrorReply(std::string("the node's relay could not reach the run's store: ") +
                                error.what());
    }

    lock.lock();
    if (state->stopping) break;
    state->results.push_back(std::move(result));
    if (state->wake) state->wake();
  }
  --state->workers;
}

}  // namespace infini::rendezvous::store_server
