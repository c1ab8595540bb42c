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
#pragma once

#include <cstdint>
#include <deque>
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

class KeyValueTable {
 public:
  // Handles one request of `client`. Returns true when it was answered (the
  // answer is in the outbox), false when it waits: a Get or Wait on a missing
  // key. A client has at most one waiting request; it must not send another
  // before that one is answered (CHECKed: the caller's bug).
  bool Handle(ClientId client, const wire::Request& request, Milliseconds now);
  // Answers kTimeout to every waiter whose deadline is <= now.
  void ExpireWaiters(Milliseconds now);
  // The earliest deadline of a waiter, or -1 when nothing waits.
  Milliseconds NextDeadline() const;
  // The client left: its waiting request is dropped, and answers to it still
  // in the outbox are removed.
  void Forget(ClientId client);
  bool IsWaiting(ClientId client) const { return waiters_.contains(client); }

  // Takes the answers made so far, oldest first.
  std::deque<Completion> TakeCompletions() { return std::exchange(outbox_, {}); }
  bool HasCompletions() const { return !outbox_.empty(); }

  size_t num_keys() const { return data_.size(); }
  size_t num_waiters() const { return waiters_.size(); }
  // Waiter registrations over all keys (a Wait on k missing keys counts k).
  size_t num_registrations() const { return num_registrations_; }

 private:
  // One entry of a key's waiter list: who waits and which of its
  // registrations this entry is.
  struct WaitEntry {
    ClientId client;
    size_t registration;
  };
  using WaitList = std::list<WaitEntry>;
  struct Registration {
    std::string key;
    WaitList::iterator position;
    bool active = true;  // false once the key's list was taken by a wake-up
  };
  struct Waiter {
    bool is_get = false;  // Get answers with the value, Wait with kOk
    size_t missing_keys = 0;
    Milliseconds deadline = 0;
    std::vector<Registration> registrations;
  };

  void Answer(ClientId client, wire::Reply reply) { outbox_.push_back({client, std::move(reply)}); }
  static wire::Reply Error(std::string text);
  void SetValue(const std::string& key, std::shared_ptr<const std::string> value);
  void Add(ClientId client, const std::string& key, int64_t delta);
  void CompareSet(ClientId client, const wire::Request& request);
  bool Get(ClientId client, const std::string& key, Milliseconds deadline);
  bool Wait(ClientId client, const std::vector<std::string>& keys, Milliseconds deadline);
  void Park(ClientId client, bool is_get, std::vector<std::string> missing_keys,
            Milliseconds deadline);
  void WakeWaitersOf(const std::string& key);
  // Removes `client`'s waiter from every list; does not answer it.
  void Unpark(ClientId client);

  std::unordered_map<std::string, std::shared_ptr<const std::string>> data_;
  std::unordered_map<std::string, WaitList> waiters_by_key_;
  std::unordered_map<ClientId, Waiter> waiters_;
  std::set<std::pair<Milliseconds, ClientId>> deadlines_;
  size_t num_registrations_ = 0;
  std::deque<Completion> outbox_;
};

}  // namespace infini::rendezvous
