// The store's keys and waiters, without sockets (model: the key-value daemon
// of c10d's libuv backend). Clients are numbers; time is a number of
// milliseconds that the caller supplies, so tests and fuzzers drive the table
// directly.
//
// Every answer goes to an outbox, in the order it was made, and is taken with
// TakeCompletions(). A Set that wakes waiters only puts their answers in the
// outbox: it never calls back into its caller, so a chain of waiters each of
// whose next request sets the next waiter's key is handled by the caller's
// loop, one link at a time, never by recursion.
//
// Memory: the table counts what it holds. Stored bytes are every key (its
// bytes and a fixed overhead) and every value still alive, also one that a
// reply not yet sent keeps after its key was overwritten or deleted; a Set,
// Add or CompareSet that would take them above `max_stored_bytes` is answered
// with an error and changes nothing. Waiter bytes are the bookkeeping of the
// waiting Gets and Waits (per registration and per waited-for key, as
// allocated); a Get or Wait that would take them above `max_waiter_bytes` is
// answered with an error instead of waiting. Both are given back when their
// keys, values or waits end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <list>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "request_codec.h"

namespace infini::rendezvous {

using ClientId = uint64_t;
// Milliseconds on the caller's monotonic clock.
using Milliseconds = int64_t;

struct Completion {
  ClientId client = 0;
  wire::Reply reply;
};

struct TableLimits {
  // Keys and live values together (see above); the error names the option.
  size_t max_stored_bytes = std::numeric_limits<size_t>::max();
  // Bookkeeping of waiting requests; the error names max_buffered_bytes, the
  // server's budget that these bytes are charged to.
  size_t max_waiter_bytes = std::numeric_limits<size_t>::max();
};

class KeyValueTable {
 public:
  // Fixed costs counted per stored key, per waiter, per registration of a
  // waiter on a key and per key that waiters wait for (besides the key's
  // bytes): what this table allocates for each, rounded up.
  static constexpr size_t kKeyOverheadBytes = 96;
  static constexpr size_t kWaiterOverheadBytes = 192;
  static constexpr size_t kRegistrationBytes = 80;
  static constexpr size_t kWaitedKeyOverheadBytes = 128;

  explicit KeyValueTable(TableLimits limits = {});
  ~KeyValueTable();
  KeyValueTable(const KeyValueTable&) = delete;
  KeyValueTable& operator=(const KeyValueTable&) = delete;

  // Handles one request of `client` (its value is moved into the table).
  // Returns true when it was answered (the answer is in the outbox), false
  // when it waits: a Get or Wait on a missing key. A client has at most one
  // waiting request; it must not send another before that one is answered
  // (CHECKed: the caller's bug).
  bool Handle(ClientId client, wire::Request request, Milliseconds now);
  // Answers kTimeout to every waiter whose deadline is <= now.
  void ExpireWaiters(Milliseconds now);
  // The earliest deadline of a waiter, or -1 when nothing waits.
  Milliseconds NextDeadline() const;
  // The client left: its waiting request is dropped, and answers to it still
  // in the outbox are removed.
  void Forget(ClientId client);
  bool IsWaiting(ClientId client) const { return waiters_.contains(client); }
  // For a relay, whose waiters wait on keys that only its upstream holds:
  // whether anyone waits on `key`, and answering every such waiter an error.
  bool HasWaitersOn(const std::string& key) const { return waiters_by_key_.contains(key); }
  void FailWaitersOn(const std::string& key, const std::string& error);
  // The latest deadline of the waiters on `key`, or -1 when none waits: how
  // long a relay's upstream watch of it is still needed.
  Milliseconds LatestDeadlineOn(const std::string& key) const;
  bool Contains(const std::string& key) const { return data_.contains(key); }

  // Takes the answers made so far, oldest first.
  std::deque<Completion> TakeCompletions() { return std::exchange(outbox_, {}); }
  bool HasCompletions() const { return !outbox_.empty(); }

  size_t num_keys() const { return data_.size(); }
  size_t num_waiters() const { return waiters_.size(); }
  // Waiter registrations over all keys (a Wait on k missing keys counts k).
  size_t num_registrations() const { return num_registrations_; }
  // What the limits are checked against (see above).
  size_t stored_bytes() const;
  size_t waiter_bytes() const { return waiter_bytes_; }
  const TableLimits& limits() const { return limits_; }

 private:
  // One entry of a key's waiter list: who waits and which of its
  // registrations this entry is.
  struct WaitEntry {
    ClientId client;
    size_t registration;
  };
  using WaitList = std::list<WaitEntry>;
  using WaitedKey = std::pair<const std::string, WaitList>;  // an entry of waiters_by_key_
  struct Registration {
    WaitedKey* waited;  // stable: unordered_map entries do not move
    WaitList::iterator position;
    bool active = true;  // false once the key's list was taken by a wake-up
  };
  struct Waiter {
    bool is_get = false;  // Get answers with the value, Wait with kOk
    size_t missing_keys = 0;
    Milliseconds deadline = 0;
    std::vector<Registration> registrations;
  };

  // Bytes of the values alive, shared with each value's deleter (a value may
  // outlive the table in a reply that is still being sent).
  struct ValueAccount {
    size_t bytes = 0;
  };
  using Value = std::shared_ptr<const std::string>;

  void Answer(ClientId client, wire::Reply reply) { outbox_.push_back({client, std::move(reply)}); }
  static wire::Reply Error(std::string text);
  // A value counted in the stored bytes while it lives.
  Value MakeValue(std::string bytes);
  // Whether `key` may take a value of `value_bytes` within max_stored_bytes;
  // otherwise answers `client` an error naming the limit.
  bool Fits(ClientId client, const std::string& key, size_t value_bytes, const char* doing);
  void SetValue(const std::string& key, Value value);
  bool EraseKey(const std::string& key);
  void Add(ClientId client, const std::string& key, int64_t delta);
  void CompareSet(ClientId client, wire::Request& request);
  bool Get(ClientId client, const std::string& key, Milliseconds deadline);
  bool Wait(ClientId client, const std::vector<std::string>& keys, Milliseconds deadline);
  // Parks `client` on its missing keys; false (and an error answered) when
  // its bookkeeping would exceed max_waiter_bytes.
  bool Park(ClientId client, bool is_get, std::vector<std::string> missing_keys,
            Milliseconds deadline);
  void WakeWaitersOf(const std::string& key);
  // Removes `client`'s waiter from every list; does not answer it.
  void Unpark(ClientId client);
  // Forgets a waiter that left every list, giving back its bytes.
  void EraseWaiter(std::unordered_map<ClientId, Waiter>::iterator waiter);
  void EraseWaitedKey(WaitedKey* waited);

  TableLimits limits_;
  std::shared_ptr<ValueAccount> value_account_ = std::make_shared<ValueAccount>();
  size_t key_bytes_ = 0;     // stored keys with their overhead
  size_t waiter_bytes_ = 0;  // waiters, registrations and waited-for keys
  std::unordered_map<std::string, Value> data_;
  std::unordered_map<std::string, WaitList> waiters_by_key_;
  std::unordered_map<ClientId, Waiter> waiters_;
  std::set<std::pair<Milliseconds, ClientId>> deadlines_;
  size_t num_registrations_ = 0;
  std::deque<Completion> outbox_;
};

}  // namespace infini::rendezvous
