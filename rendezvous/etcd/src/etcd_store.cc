#include "infini/rendezvous/etcd_store.h"

#include <openssl/sha.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "etcd_http.h"
#include "infini/common/json_quoted.h"
#include "infini/common/one_line.h"

namespace infini::rendezvous {

using etcd::At;
using etcd::Base64Decode;
using etcd::Base64Encode;
using etcd::Bool;
using etcd::EtcdHttp;
using etcd::Int;
using etcd::Json;
using etcd::PrefixRangeEnd;
using etcd::Text;
using Clock = std::chrono::steady_clock;

namespace {

// Contended read-modify-write (Add) gives up after this many lost races.
constexpr int kMaxCasRounds = 10000;
// After a watch lost its member: how long before the next member is tried.
constexpr std::chrono::milliseconds kWatchRetryPause{200};

std::string Field(const std::string& name, const std::string& value) {
  return JsonQuoted(name) + ":" + JsonQuoted(value);
}

// The start of the range of keys under `prefix` ("\0" for every key: etcd
// refuses an empty key).
std::string RangeStart(const std::string& prefix) {
  return prefix.empty() ? std::string(1, '\0') : prefix;
}

// The first key-value of a range reply, if any.
const Json* FirstKv(const Json& range_reply) {
  const Json& kvs = At(range_reply, "/kvs");
  return kvs.is_array() && !kvs.empty() ? &kvs.front() : nullptr;
}

}  // namespace

std::string EtcdRunPrefix(const std::string& run_id, const std::string& token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (int i = 0; i < 8; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 0xF];
  }
  return "infini_run/" + run_id + "/" + hex + "/";
}

struct EtcdStore::State {
  EtcdStoreOptions options;
  std::shared_ptr<etcd::TrafficCounters> counters = std::make_shared<etcd::TrafficCounters>();
  std::string auth_token;
  int64_t lease_id = 0;
  std::atomic<bool> lease_alive{true};

  std::mutex call_mutex;  // guards http: the store's calls go one at a time
  std::unique_ptr<EtcdHttp> http;

  std::mutex stop_mutex;
  std::condition_variable stop_wake;
  std::atomic<bool> stopping{false};
  std::thread keeper;
  std::thread watcher;
  std::mutex streams_mutex;
  std::set<EtcdHttp*> streams;  // watches in progress, ended by Stop

  // Registers a watch's connection for the lifetime of the object.
  struct StreamRegistration {
    State* state;
    EtcdHttp* http;
    StreamRegistration(State* s, EtcdHttp* h) : state(s), http(h) {
      std::lock_guard lock(state->streams_mutex);
      state->streams.insert(http);
      if (state->stopping) http->Interrupt();
    }
    ~StreamRegistration() {
      std::lock_guard lock(state->streams_mutex);
      state->streams.erase(http);
    }
  };

  void Stop() {
    {
      std::lock_guard lock(stop_mutex);
      stopping = true;
    }
    stop_wake.notify_all();
    {
      std::lock_guard lock(streams_mutex);
      for (EtcdHttp* stream : streams) stream->Interrupt();
    }
    if (keeper.joinable()) keeper.join();
    if (watcher.joinable()) watcher.join();
  }

  std::unique_ptr<EtcdHttp> NewHttp() const {
    auto connection =
        std::make_unique<EtcdHttp>(options.endpoints, options.request_timeout, counters);
    connection->set_auth_token(auth_token);
    return connection;
  }

  Json Call(const std::string& path, const std::string& body) {
    std::lock_guard lock(call_mutex);
    return http->Call(path, body);
  }

  std::string FullKey(const std::string& key) const { return options.key_prefix + key; }
  std::string KeyField(const std::string& key) const {
    return Field("key", Base64Encode(FullKey(key)));
  }
  std::string LeaseField() const {
    return lease_id == 0 ? "" : "," + Field("lease", std::to_string(lease_id));
  }
  std::string PutBody(const std::string& key, const std::string& value) const {
    return "{" + KeyField(key) + "," + Field("value", Base64Encode(value)) + LeaseField() + "}";
  }

  // Sleeps up to `duration`; false when the store is stopping.
  bool PauseUnlessStopping(std::chrono::milliseconds duration) {
    std::unique_lock lock(stop_mutex);
    return !stop_wake.wait_for(lock, duration, [&] { return stopping.load(); });
  }

  void KeepLeaseAlive() {
    auto connection = NewHttp();
    const auto interval = std::max(std::chrono::milliseconds(100), options.lease_ttl / 3);
    const std::string body = "{" + Field("ID", std::to_string(lease_id)) + "}";
    while (PauseUnlessStopping(interval)) {
      try {
        const Json reply = connection->Call("/v3/lease/keepalive", body);
        if (Int(At(reply, "/result/TTL")) <= 0) {
          lease_alive = false;  // expired while this process stalled
          return;
        }
      } catch (const StoreError&) {
        // No member answers now; the store's own calls report that. Keep
        // trying: a member may come back before the lease runs out.
      }
    }
  }

  // Waits (a watch) until `key` is put after `revision`, or `deadline`.
  void WatchForPut(const std::string& key, int64_t revision, Clock::time_point deadline) {
    auto connection = NewHttp();
    StreamRegistration registration(this, connection.get());
    const std::string body = "{\"create_request\":{" + KeyField(key) + "," +
                             Field("start_revision", std::to_string(revision + 1)) + "}}";
    auto put_seen = [](const Json& message) {
      for (const Json& event : At(message, "/result/events")) {
        if (Text(At(event, "/type")) != "DELETE") return false;  // stop: it is there
      }
      return true;
    };
    auto keep_going = [this] { return !stopping.load(); };
    try {
      connection->Stream("/v3/watch", body, put_seen, keep_going, deadline);
    } catch (const StoreError&) {
      // The member went away: the caller reads again (from another member).
      std::lock_guard lock(call_mutex);
      http->NextMember();
    }
  }

  void FollowPrefix(const std::string& prefix, int64_t start_revision,
                    const std::function<void(const EtcdEvent&)>& on_event) {
    auto connection = NewHttp();
    StreamRegistration registration(this, connection.get());
    int64_t next_revision = start_revision;
    auto deliver = [&](const Json& message) {
      for (const Json& event : At(message, "/result/events")) {
        EtcdEvent change;
        change.deleted = Text(At(event, "/type")) == "DELETE";
        change.key = Base64Decode(Text(At(event, "/kv/key"))).substr(options.key_prefix.size());
        change.value = Base64Decode(Text(At(event, "/kv/value")));
        change.revision = Int(At(event, "/kv/mod_revision"));
        next_revision = std::max(next_revision, change.revision + 1);
        on_event(change);
      }
      return true;
    };
    auto keep_going = [this] { return !stopping.load(); };
    while (!stopping) {
      const std::string body = "{\"create_request\":{" +
                               Field("key", Base64Encode(RangeStart(prefix))) + "," +
                               Field("range_end", Base64Encode(PrefixRangeEnd(prefix))) + "," +
                               Field("start_revision", std::to_string(next_revision)) + "}}";
      try {
        connection->Stream("/v3/watch", body, deliver, keep_going, Clock::time_point::max());
      } catch (const StoreError&) {
        connection->NextMember();  // resume where it stopped, on another member
        PauseUnlessStopping(kWatchRetryPause);
      }
    }
  }
};

std::unique_ptr<EtcdStore> EtcdStore::Connect(const EtcdStoreOptions& options) {
  if (options.endpoints.empty()) throw StoreError("no etcd endpoint given");
  auto state = std::make_shared<State>();
  state->options = options;
  state->http = state->NewHttp();
  if (!options.user.empty()) {
    const Json reply =
        state->Call("/v3/auth/authenticate", "{" + Field("name", options.user) + "," +
                                                 Field("password", options.password) + "}");
    state->auth_token = Text(At(reply, "/token"));
    state->http->set_auth_token(state->auth_token);
  }
  // One read under the prefix: a cluster that refuses this client (its
  // authentication is on and the client has no user, or no permission)
  // says so here, not at the first write (etcd grants leases to anyone).
  state->Call("/v3/kv/range", "{" + Field("key", Base64Encode(RangeStart(options.key_prefix))) +
                                  ",\"count_only\":true}");
  if (options.lease_ttl.count() > 0) {
    const int64_t seconds = std::max<int64_t>(1, (options.lease_ttl.count() + 999) / 1000);
    const Json reply =
        state->Call("/v3/lease/grant", "{" + Field("TTL", std::to_string(seconds)) + "}");
    state->lease_id = Int(At(reply, "/ID"));
    if (state->lease_id == 0)
      throw StoreError("etcd granted no lease: " + Text(At(reply, "/error")));
    state->keeper = std::thread([raw = state.get()] { raw->KeepLeaseAlive(); });
  }
  return std::unique_ptr<EtcdStore>(new EtcdStore(std::move(state)));
}

EtcdStore::~EtcdStore() { state_->Stop(); }

void EtcdStore::StopBackground() { state_->Stop(); }

void EtcdStore::Set(const std::string& key, const std::string& value) {
  state_->Call("/v3/kv/put", state_->PutBody(key, value));
}

std::string EtcdStore::Get(const std::string& key) {
  // One request when the key is there; a watch only when it is not yet.
  for (int round = 0; round < 2; ++round) {
    const Json reply = state_->Call("/v3/kv/range", "{" + state_->KeyField(key) + "}");
    if (const Json* kv = FirstKv(reply)) return Base64Decode(Text(At(*kv, "/value")));
    if (round == 0) Wait({key}, timeout_);
  }
  throw StoreError("etcd key '" + OneLine(key) + "' was deleted while it was read");
}

int64_t EtcdStore::Add(const std::string& key, int64_t delta) {
  // Read, then write only if nobody wrote in between (a transaction on the
  // key's revision); retried when another client won the race.
  for (int round = 0; round < kMaxCasRounds; ++round) {
    const Json reply = state_->Call("/v3/kv/range", "{" + state_->KeyField(key) + "}");
    const Json* kv = FirstKv(reply);
    int64_t value =
        kv ? std::strtoll(Base64Decode(Text(At(*kv, "/value"))).c_str(), nullptr, 10) : 0;
    value += delta;
    const std::string compare =
        kv ? "{" + state_->KeyField(key) + ",\"target\":\"MOD\",\"result\":\"EQUAL\"," +
                 Field("mod_revision", Text(At(*kv, "/mod_revision"))) + "}"
           : "{" + state_->KeyField(key) +
                 ",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}";
    const Json txn =
        state_->Call("/v3/kv/txn", "{\"compare\":[" + compare + "],\"success\":[{\"requestPut\":" +
                                       state_->PutBody(key, std::to_string(value)) + "}]}");
    if (Bool(At(txn, "/succeeded"))) return value;
  }
  throw StoreError("etcd key '" + OneLine(key) + "': lost " + std::to_string(kMaxCasRounds) +
                   " races to update it");
}

std::string EtcdStore::CompareSet(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  const std::string compare =
      expected.empty()
          ? "{" + state_->KeyField(key) +
                ",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}"
          : "{" + state_->KeyField(key) + ",\"target\":\"VALUE\",\"result\":\"EQUAL\"," +
                Field("value", Base64Encode(expected)) + "}";
  const Json txn = state_->Call(
      "/v3/kv/txn", "{\"compare\":[" + compare +
                        "],\"success\":[{\"requestPut\":" + state_->PutBody(key, desired) +
                        "}],\"failure\":[{\"requestRange\":{" + state_->KeyField(key) + "}}]}");
  if (Bool(At(txn, "/succeeded"))) return desired;
  if (const Json* kv = FirstKv(At(txn, "/responses/0/response_range"))) {
    return Base64Decode(Text(At(*kv, "/value")));
  }
  return expected;  // missing, and a non-empty value expected: stays missing
}

std::optional<EtcdStore::Revisioned> EtcdStore::GetRevisioned(const std::string& key) {
  const Json reply = state_->Call("/v3/kv/range", "{" + state_->KeyField(key) + "}");
  const Json* kv = FirstKv(reply);
  if (kv == nullptr) return std::nullopt;
  return Revisioned{Base64Decode(Text(At(*kv, "/value"))), Int(At(*kv, "/mod_revision"))};
}

EtcdStore::RevisionedPut EtcdStore::PutIfRevision(const std::string& key, int64_t mod_revision,
                                                  const std::string& value) {
  const std::string compare =
      mod_revision == 0
          ? "{" + state_->KeyField(key) +
                ",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}"
          : "{" + state_->KeyField(key) + ",\"target\":\"MOD\",\"result\":\"EQUAL\"," +
                Field("mod_revision", std::to_string(mod_revision)) + "}";
  const Json txn = state_->Call(
      "/v3/kv/txn", "{\"compare\":[" + compare +
                        "],\"success\":[{\"requestPut\":" + state_->PutBody(key, value) +
                        "}],\"failure\":[{\"requestRange\":{" + state_->KeyField(key) + "}}]}");
  // A put's revision is the transaction's.
  if (Bool(At(txn, "/succeeded")))
    return {true, Revisioned{value, Int(At(txn, "/header/revision"))}};
  const Json* kv = FirstKv(At(txn, "/responses/0/response_range"));
  if (kv == nullptr) return {false, std::nullopt};
  return {false, Revisioned{Base64Decode(Text(At(*kv, "/value"))), Int(At(*kv, "/mod_revision"))}};
}

bool EtcdStore::DeleteKey(const std::string& key) {
  return Int(At(state_->Call("/v3/kv/deleterange", "{" + state_->KeyField(key) + "}"),
                "/deleted")) > 0;
}

bool EtcdStore::Check(const std::vector<std::string>& keys) {
  // One transaction of "exists" comparisons per 128 keys (etcd's default
  // --max-txn-ops).
  constexpr size_t kComparesPerTxn = 128;
  for (size_t first = 0; first < keys.size(); first += kComparesPerTxn) {
    std::string compares;
    for (size_t i = first; i < std::min(keys.size(), first + kComparesPerTxn); ++i) {
      compares += (compares.empty() ? "{" : ",{") + state_->KeyField(keys[i]) +
                  ",\"target\":\"CREATE\",\"result\":\"GREATER\",\"create_revision\":\"0\"}";
    }
    if (!Bool(At(state_->Call("/v3/kv/txn", "{\"compare\":[" + compares + "]}"), "/succeeded"))) {
      return false;
    }
  }
  return true;
}

void EtcdStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (const std::string& key : keys) {
    while (true) {
      const Json reply =
          state_->Call("/v3/kv/range", "{" + state_->KeyField(key) + ",\"count_only\":true}");
      if (Int(At(reply, "/count")) > 0) break;
      if (state_->stopping) {
        throw StoreError("etcd store stopped while waiting for key '" + OneLine(key) + "'");
      }
      if (Clock::now() >= deadline) {
        throw StoreTimeoutError("timed out after " + std::to_string(timeout.count()) +
                                " ms waiting for etcd key '" + OneLine(key) + "'");
      }
      state_->WatchForPut(key, Int(At(reply, "/header/revision")), deadline);
    }
  }
}

std::vector<std::pair<std::string, std::string>> EtcdStore::List(const std::string& sub_prefix) {
  const std::string prefix = state_->FullKey(sub_prefix);
  const Json reply = state_->Call(
      "/v3/kv/range", "{" + Field("key", Base64Encode(RangeStart(prefix))) + "," +
                          Field("range_end", Base64Encode(PrefixRangeEnd(prefix))) + "}");
  std::vector<std::pair<std::string, std::string>> entries;
  for (const Json& kv : At(reply, "/kvs")) {
    entries.emplace_back(
        Base64Decode(Text(At(kv, "/key"))).substr(state_->options.key_prefix.size()),
        Base64Decode(Text(At(kv, "/value"))));
  }
  return entries;
}

void EtcdStore::DeleteAll() {
  const std::string& prefix = state_->options.key_prefix;
  state_->Call("/v3/kv/deleterange", "{" + Field("key", Base64Encode(RangeStart(prefix))) + "," +
                                         Field("range_end", Base64Encode(PrefixRangeEnd(prefix))) +
                                         "}");
}

void EtcdStore::Watch(const std::string& sub_prefix,
                      std::function<void(const EtcdEvent&)> on_event) {
  if (state_->watcher.joinable()) throw StoreError("EtcdStore::Watch: one watch per store");
  // Changes after now: the revision the cluster is at.
  const Json reply = state_->Call(
      "/v3/kv/range", "{" + Field("key", Base64Encode(RangeStart(state_->FullKey(sub_prefix)))) +
                          ",\"count_only\":true}");
  const int64_t start = Int(At(reply, "/header/revision")) + 1;
  state_->watcher =
      std::thread([raw = state_.get(), prefix = state_->FullKey(sub_prefix), start,
                   on_event = std::move(on_event)] { raw->FollowPrefix(prefix, start, on_event); });
}

bool EtcdStore::lease_alive() const { return state_->lease_alive; }

std::string EtcdStore::endpoints_text() const {
  std::string text;
  for (const std::string& endpoint : state_->options.endpoints) {
    text += (text.empty() ? "" : ",") + endpoint;
  }
  return text;
}

EtcdTraffic EtcdStore::traffic() const {
  return {state_->counters->requests, state_->counters->bytes_sent,
          state_->counters->bytes_received};
}

}  // namespace infini::rendezvous
