#include "host_bootstrap_store.h"

#include <algorithm>
#include <cstring>

#include "errors.h"

namespace infini::gloo_backend {
namespace {

constexpr size_t kFirstGetCapacity = 256;

}  // namespace

void RequireUsableBootstrap(const infiniCclBootstrap_t& bootstrap) {
  RequireArgument(
      bootstrap.struct_size >= INFINI_CCL_STRUCT_SIZE(infiniCclBootstrap_t, get_last_error),
      "bootstrap->struct_size " + std::to_string(bootstrap.struct_size) +
          " is too small; expected sizeof(infiniCclBootstrap_t)");
  RequireArgument(bootstrap.set != nullptr && bootstrap.get != nullptr &&
                      bootstrap.add != nullptr && bootstrap.wait != nullptr &&
                      bootstrap.get_last_error != nullptr,
                  "bootstrap has a NULL entry; set, get, add, wait and get_last_error are needed");
}

HostBootstrapStore::HostBootstrapStore(const infiniCclBootstrap_t& bootstrap,
                                       std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  RequireUsableBootstrap(bootstrap);
  std::memcpy(&bootstrap_, &bootstrap, std::min(sizeof(bootstrap_), bootstrap.struct_size));
}

void HostBootstrapStore::ThrowFailure(infiniCclResult_t result, const std::string& what) const {
  const char* text = bootstrap_.get_last_error(bootstrap_.context);
  throw PluginError(result == infiniCclSuccess ? infiniCclInternalError : result,
                    "host bootstrap " + what + " failed: " + (text != nullptr ? text : ""));
}

void HostBootstrapStore::set(const std::string& key, const std::vector<char>& data) {
  const infiniCclResult_t result =
      bootstrap_.set(bootstrap_.context, key.c_str(), data.data(), data.size());
  if (result != infiniCclSuccess) ThrowFailure(result, "set('" + key + "')");
}

std::vector<char> HostBootstrapStore::get(const std::string& key) {
  std::vector<char> value(kFirstGetCapacity);
  size_t bytes = 0;
  infiniCclResult_t result = bootstrap_.get(bootstrap_.context, key.c_str(), value.data(),
                                            value.size(), &bytes, timeout_.count());
  if (result == infiniCclSuccess && bytes > value.size()) {
    // The key exists now: the second call returns at once with all of it.
    value.resize(bytes);
    result = bootstrap_.get(bootstrap_.context, key.c_str(), value.data(), value.size(), &bytes,
                            timeout_.count());
  }
  if (result != infiniCclSuccess) ThrowFailure(result, "get('" + key + "')");
  value.resize(std::min(bytes, value.size()));
  return value;
}

void HostBootstrapStore::wait(const std::vector<std::string>& keys,
                              const std::chrono::milliseconds& timeout) {
  std::vector<const char*> names;
  names.reserve(keys.size());
  for (const std::string& key : keys) names.push_back(key.c_str());
  const infiniCclResult_t result =
      bootstrap_.wait(bootstrap_.context, names.data(), names.size(), timeout.count());
  if (result != infiniCclSuccess) {
    ThrowFailure(result, "wait(" + std::to_string(keys.size()) + " key(s), first '" +
                             (keys.empty() ? std::string() : keys.front()) + "')");
  }
}

}  // namespace infini::gloo_backend
