// A Store on etcd (v3 API through its JSON gateway): what launchers of
// clusters that already run etcd meet through instead of node 0's store.
// Every key lives under one prefix (the run's); writes may carry this
// client's lease, which a thread of its own keeps alive, so that the keys of
// a client that dies or stalls vanish when the lease expires; changes are
// followed by watches, never by polling.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "infini/rendezvous/store.h"

namespace infini::rendezvous {

struct EtcdStoreOptions {
  // host:port of each member; a request goes to the first that answers.
  std::vector<std::string> endpoints;
  // Every key of the store lives under this prefix (see EtcdRunPrefix).
  std::string key_prefix;
  // > 0: writes carry a lease of this time-to-live (etcd rounds it up to
  // whole seconds), kept alive until the store is destroyed.
  std::chrono::milliseconds lease_ttl{0};
  // How long one request may take before the next member is tried.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(5)};
  // etcd's own authentication, where the cluster has it on (empty: none).
  std::string user;
  std::string password;
};

// A change under the watched prefix; `key` without the store's prefix.
struct EtcdEvent {
  bool deleted = false;
  std::string key;
  std::string value;
  int64_t revision = 0;
};

// What this client sent and received, counted at the HTTP layer.
struct EtcdTraffic {
  uint64_t requests = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

// "infini_run/<run_id>/<16 hex digits of SHA-256(token)>/": only who knows
// the run's secret can name (and so read) the run's keys.
std::string EtcdRunPrefix(const std::string& run_id, const std::string& token);

class EtcdStore : public Store {
 public:
  // Reaches a member (and grants the lease). Throws StoreError naming every
  // endpoint tried when none answers.
  static std::unique_ptr<EtcdStore> Connect(const EtcdStoreOptions& options);
  // Stops the lease's keep-alive and the watches (StopBackground).
  ~EtcdStore() override;
  // Ends the lease's keep-alive and the watch now and joins their threads
  // (promptly: a watch's socket is shut down). The lease then expires; calls
  // other than watches still work. Call before the process exits.
  void StopBackground();

  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  std::string CompareSet(const std::string& key, const std::string& expected,
                         const std::string& desired) override;
  bool DeleteKey(const std::string& key) override;
  bool Check(const std::vector<std::string>& keys) override;
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::Wait;

  // A key's value and etcd's revision of its last put (mod_revision).
  struct Revisioned {
    std::string value;
    int64_t mod_revision = 0;
  };
  // `key` as it is, nothing when it is missing (one request; never waits).
  std::optional<Revisioned> GetRevisioned(const std::string& key);
  // Puts `value` only while `key`'s mod_revision is `mod_revision` (0: only
  // while it is missing), in one transaction that returns the key otherwise.
  struct RevisionedPut {
    bool put = false;
    std::optional<Revisioned> now;  // after the transaction (nothing: missing)
  };
  RevisionedPut PutIfRevision(const std::string& key, int64_t mod_revision,
                              const std::string& value);

  // Every key under the prefix, by key (one request): batched reads.
  std::vector<std::pair<std::string, std::string>> List(const std::string& sub_prefix);
  // Removes every key under the store's prefix: the run's end.
  void DeleteAll();
  // Calls `on_event` (on a thread of the store) for each change under
  // prefix + `sub_prefix` after this call, in revision order, across
  // members failing over. At most one watch per store.
  void Watch(const std::string& sub_prefix, std::function<void(const EtcdEvent&)> on_event);
  // Whether the lease is still alive (false once etcd said it expired).
  bool lease_alive() const;
  // "host:port,host:port": for messages.
  std::string endpoints_text() const;
  EtcdTraffic traffic() const;

  struct State;  // etcd_store.cc

 private:
  explicit EtcdStore(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace infini::rendezvous
