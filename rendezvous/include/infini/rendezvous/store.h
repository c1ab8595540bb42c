// The key-value store that ranks and launchers meet through (model: c10d's
// Store). Small values only: addresses, unique ids, counters.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace infini::rendezvous {

// Any failure of a store operation: the server is gone, the connection broke,
// the server refused a request.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The server answered but the hello failed: it refused this client's run
// token, could not prove its own, or is not an InfiniCCL store of this
// protocol. Retrying does not help; the message names the endpoint and what
// to set.
class StoreHandshakeError : public StoreError {
 public:
  using StoreError::StoreError;
};

// A blocking operation (Get, Wait) did not complete before its deadline.
class StoreTimeoutError : public StoreError {
 public:
  using StoreError::StoreError;
};

class Store {
 public:
  // Every blocking call has a deadline; this is the default one.
  static constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::minutes(5)};

  virtual ~Store() = default;

  // Sets `key` to `value`, waking everyone waiting on `key`.
  virtual void Set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` exists (up to the timeout), then returns its value.
  virtual std::string Get(const std::string& key) = 0;
  // Adds `delta` to the integer stored at `key` (missing = 0) and returns
  // the new value. Atomic across clients.
  virtual int64_t Add(const std::string& key, int64_t delta) = 0;
  // If `key` holds `expected` (or is missing and `expected` is empty), sets it
  // to `desired`. Returns the value the key holds afterwards; as in c10d, a
  // missing key with a non-empty `expected` stays missing and `expected` is
  // returned.
  virtual std::string CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) = 0;
  // Removes `key`; returns whether it existed.
  virtual bool DeleteKey(const std::string& key) = 0;
  // Returns whether all `keys` exist, without waiting.
  virtual bool Check(const std::vector<std::string>& keys) = 0;
  // Waits until all `keys` exist, or throws StoreTimeoutError after `timeout`.
  virtual void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void Wait(const std::vector<std::string>& keys) { Wait(keys, timeout_); }

  // On-close keys (model: ZooKeeper's ephemeral nodes, inverted): asks the
  // server to set `key` to `value`, waking its waiters, when this client's
  // connection closes for any reason (its process killed, the connection
  // reset or refused) unless CancelOnClose(key) came first. So others learn
  // at once that this client is gone. Registering a key again replaces its
  // value. A store without them (the default) throws StoreError.
  virtual void SetOnClose(const std::string& key, const std::string& value);
  // Forgets the registration of `key` (none: nothing happens); a clean exit
  // cancels its keys before it closes.
  virtual void CancelOnClose(const std::string& key);

  // Deadline of Get and of Wait without an explicit timeout.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

}  // namespace infini::rendezvous
