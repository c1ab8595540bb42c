#include "infini/ccl/memory_bootstrap_store.h"

#include <charconv>

namespace infini::ccl {

MemoryBootstrapStore::MemoryBootstrapStore(std::chrono::milliseconds default_timeout)
    : default_timeout_(default_timeout) {}

void MemoryBootstrapStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
  }
  changed_.notify_all();
}

std::string MemoryBootstrapStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  WaitLocked(lock, {key}, timeout);
  return values_.at(key);
}

std::optional<std::string> MemoryBootstrapStore::TryGet(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = values_.find(key);
  if (found == values_.end()) return std::nullopt;
  return found->second;
}

int64_t MemoryBootstrapStore::Add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = values_.find(key);
    if (found != values_.end()) {
      const std::string& text = found->second;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error != std::errc() || end != text.data() + text.size()) {
        throw Error(infiniCclInvalidUsage, "memory bootstrap store: Add on key '" + key +
                                               "' whose value '" + text +
                                               "' is not an integer (expected one set by Add)");
      }
    }
    value += delta;
    values_[key] = std::to_string(value);
  }
  changed_.notify_all();
  return value;
}

void MemoryBootstrapStore::Wait(const std::vector<std::string>& keys,
                                std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  WaitLocked(lock, keys, timeout);
}

std::set<std::string> MemoryBootstrapStore::Keys() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::set<std::string> keys;
  for (const auto& [key, value] : values_) keys.insert(key);
  return keys;
}

void MemoryBootstrapStore::WaitLocked(std::unique_lock<std::mutex>& lock,
                                      const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) timeout = default_timeout_;
  const std::string* missing = nullptr;
  const bool all_there = changed_.wait_for(lock, timeout, [&] {
    for (const std::string& key : keys) {
      if (values_.count(key) == 0) {
        missing = &key;
        return false;
      }
    }
    return true;
  });
  if (!all_there) {
    throw Error(infiniCclTimeout, "memory bootstrap store: key '" + *missing + "' not set after " +
                                      std::to_string(timeout.count()) + " ms");
  }
}

}  // namespace infini::ccl
