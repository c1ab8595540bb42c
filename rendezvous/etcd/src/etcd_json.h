// Reading etcd's gateway replies (nlohmann/json). The gateway omits fields
// that hold their default and writes 64-bit integers as strings, so a
// member is read through a path with a fallback, never by throwing.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

namespace infini::rendezvous::etcd {

using Json = nlohmann::json;

// The value at `pointer` ("/result/TTL"); null when any part is absent.
inline const Json& At(const Json& value, const char* pointer) {
  static const Json kAbsent;
  const Json::json_pointer path(pointer);
  return value.contains(path) ? value[path] : kAbsent;
}

// An integer the gateway wrote as a string (or a number); `fallback` when
// absent.
inline int64_t Int(const Json& value, int64_t fallback = 0) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_string() && !value.get_ref<const std::string&>().empty()) {
    return std::strtoll(value.get_ref<const std::string&>().c_str(), nullptr, 10);
  }
  return fallback;
}

// A string as it is, another scalar as its JSON text, "" when absent.
inline std::string Text(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  return value.is_null() ? std::string() : value.dump();
}

inline bool Bool(const Json& value) { return value.is_boolean() && value.get<bool>(); }

}  // namespace infini::rendezvous::etcd
