#include "infini/parallel/store_bootstrap.h"

#include <vector>

namespace infini::parallel {
namespace {

// Store failures become the codes the plugin ABI knows.
template <typename Body>
auto Translated(const std::string& key, Body&& body) {
  try {
    return body();
  } catch (const rendezvous::StoreTimeoutError& error) {
    throw ccl::Error(infiniCclTimeout, "store key '" + key + "': " + error.what());
  } catch (const rendezvous::StoreError& error) {
    throw ccl::Error(infiniCclRemoteError, "store key '" + key + "': " + error.what());
  }
}

}  // namespace

rendezvous::Store& StoreBootstrap::ThisThreadsStore() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& store = stores_[std::this_thread::get_id()];
  if (store == nullptr) store = connect_();
  return *store;
}

void StoreBootstrap::Set(const std::string& key, const std::string& value) {
  Translated(key, [&] {
    ThisThreadsStore().Set(prefix_ + key, value);
    return 0;
  });
}

std::string StoreBootstrap::Get(const std::string& key, std::chrono::milliseconds timeout) {
  return Translated(key, [&] {
    rendezvous::Store& store = ThisThreadsStore();
    if (timeout.count() >= 0) store.Wait({prefix_ + key}, timeout);
    return store.Get(prefix_ + key);
  });
}

int64_t StoreBootstrap::Add(const std::string& key, int64_t delta) {
  return Translated(key, [&] { return ThisThreadsStore().Add(prefix_ + key, delta); });
}

void StoreBootstrap::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> prefixed;
  prefixed.reserve(keys.size());
  for (const auto& key : keys) prefixed.push_back(prefix_ + key);
  Translated(keys.empty() ? std::string() : keys.front(), [&] {
    rendezvous::Store& store = ThisThreadsStore();
    if (timeout.count() < 0) {
      store.Wait(prefixed);
    } else {
      store.Wait(prefixed, timeout);
    }
    return 0;
  });
}

}  // namespace infini::parallel
