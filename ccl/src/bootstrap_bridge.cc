#include "bootstrap_bridge.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace infini::ccl {

std::optional<std::string> BootstrapStore::TryGet(const std::string& key) {
  try {
    return Get(key, std::chrono::milliseconds(0));
  } catch (const Error& error) {
    if (error.code() == infiniCclTimeout) return std::nullopt;
    throw;
  }
}

}  // namespace infini::ccl

namespace infini::ccl::internal {
namespace {

thread_local std::string t_last_error;

BootstrapStore& StoreOf(void* context) { return static_cast<BootstrapBridge*>(context)->store(); }

std::chrono::milliseconds Deadline(int64_t timeout_ms) {
  return std::chrono::milliseconds(timeout_ms < 0 ? -1 : timeout_ms);
}

// No exception may cross the ABI: each one becomes a result code and text.
template <typename Body>
infiniCclResult_t Guarded(const char* what, Body&& body) {
  try {
    body();
    return infiniCclSuccess;
  } catch (const Error& error) {
    t_last_error = std::string("bootstrap ") + what + ": " + error.what();
    return error.code();
  } catch (const std::exception& error) {
    t_last_error = std::string("bootstrap ") + what + ": " + error.what();
    return infiniCclRemoteError;
  }
}

infiniCclResult_t Set(void* context, const char* key, const void* value, size_t bytes) {
  return Guarded("set", [&] {
    StoreOf(context).Set(key, std::string(static_cast<const char*>(value), bytes));
  });
}

infiniCclResult_t Get(void* context, const char* key, void* value, size_t capacity, size_t* bytes,
                      int64_t timeout_ms) {
  return Guarded("get", [&] {
    const std::string found = StoreOf(context).Get(key, Deadline(timeout_ms));
    if (value != nullptr) std::memcpy(value, found.data(), std::min(capacity, found.size()));
    *bytes = found.size();
  });
}

infiniCclResult_t TryGet(void* context, const char* key, void* value, size_t capacity,
                         size_t* bytes, int* found) {
  return Guarded("try_get", [&] {
    const std::optional<std::string> present = StoreOf(context).TryGet(key);
    *found = present.has_value() ? 1 : 0;
    *bytes = present.has_value() ? present->size() : 0;
    if (present.has_value() && value != nullptr) {
      std::memcpy(value, present->data(), std::min(capacity, present->size()));
    }
  });
}

infiniCclResult_t Add(void* context, const char* key, int64_t delta, int64_t* value) {
  return Guarded("add", [&] { *value = StoreOf(context).Add(key, delta); });
}

infiniCclResult_t Wait(void* context, const char* const* keys, size_t nkeys, int64_t timeout_ms) {
  return Guarded("wait", [&] {
    StoreOf(context).Wait(std::vector<std::string>(keys, keys + nkeys), Deadline(timeout_ms));
  });
}

const char* LastError(void*) { return t_last_error.c_str(); }

}  // namespace

BootstrapBridge::BootstrapBridge(std::shared_ptr<BootstrapStore> store) : store_(std::move(store)) {
  table_.struct_size = sizeof(table_);
  table_.context = this;
  table_.set = &Set;
  table_.get = &Get;
  table_.add = &Add;
  table_.wait = &Wait;
  table_.get_last_error = &LastError;
  table_.try_get = &TryGet;
}

std::shared_ptr<BootstrapBridge> MakeBridge(std::shared_ptr<BootstrapStore> store) {
  if (store == nullptr) return nullptr;
  return std::make_shared<BootstrapBridge>(std::move(store));
}

}  // namespace infini::ccl::internal
