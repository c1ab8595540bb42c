// A BootstrapStore kept in this process's memory, for ranks that are threads
// of one process (c10d's HashStore): a framework driving its devices from
// threads hands one store to every rank's CommInitRank and needs no server.
// The library's own CommInitAll uses it too.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::ccl {

// Thread-safe; every wait ends at a deadline (Error(infiniCclTimeout) naming
// the key). Values live as long as the store; nothing is ever deleted.
class MemoryBootstrapStore : public BootstrapStore {
 public:
  // What Get and Wait wait when asked with a negative timeout.
  static constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(5);

  explicit MemoryBootstrapStore(std::chrono::milliseconds default_timeout = kDefaultTimeout);

  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> TryGet(const std::string& key) override;
  // Adds `delta` to the decimal integer at `key` (absent: 0) and returns
  // the sum; a value that is not an integer is Error(infiniCclInvalidUsage).
  int64_t Add(const std::string& key, int64_t delta) override;
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  // Every key set so far: what the plugin wrote, for logs and tests.
  std::set<std::string> Keys() const;

 private:
  // Waits, with `lock` held on mutex_, until every key is present.
  void WaitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                  std::chrono::milliseconds timeout);

  const std::chrono::milliseconds default_timeout_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace infini::ccl
