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

HostBootstrapStore::HostBootstrapStore(const infiniCclBootstrap_t& bootstrap) {
  RequireUsableBootstrap(bootstrap);
  std::memcpy(&bootstrap_, &bootstrap, std::min(sizeof(bootstrap_), bootstrap.struct_size));
}

void HostBootstrapStore::ThrowFailure(infiniCclResult_t result, const std::string& what) const {
  const char* text = bootstrap_.get_last_error(bootstrap_.context);
  throw PluginError(result == infiniCclSuccess ? infiniCclInternalError : result,
                    "host bootstrap " + what + " failed: " + (text != nullptr ? text : ""));
}

void HostBootstrapStore::Set(const std::string& key, const std::string& value) {
  const infiniCclResult_t result =
      bootstrap_.set(bootstrap_.context, key.c_str(), value.data(), value.size());
  if (result != infiniCclSuccess) ThrowFailure(result, "set('" + key + "')");
}

std::string HostBootstrapStore::Get(const std::string& key) {
  std::string value(kFirstGetCapacity, '\0');
  size_t bytes = 0;
  infiniCclResult_t result = bootstrap_.get(bootstrap_.context, key.c_str(), value.data(),
                                            value.size(), &bytes, timeout().count());
  if (result == infiniCclSuccess && bytes > value.size()) {
    // The key exists now: the second call returns at once with all of it.
    value.resize(bytes);
    result = bootstrap_.get(bootstrap_.context, key.c_str(), value.data(), value.size(), &bytes,
                            timeout().count());
  }
  if (result != infiniCclSuccess) ThrowFailure(result, "get('" + key + "')");
  value.resize(std::min(bytes, value.size()));
  return value;
}

int64_t HostBootstrapStore::Add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  const infiniCclResult_t result = bootstrap_.add(bootstrap_.context, key.c_str(), delta, &value);
  if (result != infiniCclSuccess) ThrowFailure(result, "add('" + key + "')");
  return value;
}

void HostBootstrapStore::Wait(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) {
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

std::string HostBootstrapStore::CompareSet(const std::string& key, const std::string&,
                                           const std::string&) {
  throw PluginError(infiniCclInternalError,
                    "compare-set('" + key + "') is not offered by the host bootstrap");
}

bool HostBootstrapStore::DeleteKey(const std::string& key) {
  throw PluginError(infiniCclInternalError,
                    "delete('" + key + "') is not offered by the host bootstrap");
}

bool HostBootstrapStore::Check(const std::vector<std::string>&) {
  throw PluginError(infiniCclInternalError, "check is not offered by the host bootstrap");
}

}  // namespace infini::gloo_backend
