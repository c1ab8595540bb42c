// A run's store, lent to a backend plugin as its bootstrap (ABI v2): keys
// under a prefix of the lender's choosing (a group's own), and a connection
// per calling thread, since a plugin may wait on one key in one thread while
// another thread of the same process sets it. Store failures become
// ccl::Error with infiniCclTimeout or infiniCclRemoteError. Process groups
// use it; so can any host that makes communicators itself.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "infini/ccl/ccl.h"
#include "infini/rendezvous/store.h"

namespace infini::parallel {

class StoreBootstrap : public ccl::BootstrapStore {
 public:
  using Connect = std::function<std::shared_ptr<rendezvous::Store>()>;
  // `connect` makes a new connection to the store; `prefix` ends with '/'.
  StoreBootstrap(std::string prefix, Connect connect)
      : prefix_(std::move(prefix)), connect_(std::move(connect)) {}

  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  rendezvous::Store& ThisThreadsStore();

  std::string prefix_;
  Connect connect_;
  std::mutex mutex_;
  std::map<std::thread::id, std::shared_ptr<rendezvous::Store>> stores_;
};

}  // namespace infini::parallel
