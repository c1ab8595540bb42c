// A small JSON reader for etcd's gateway replies (objects, arrays, strings,
// numbers, literals). The gateway writes 64-bit integers as strings, so
// every scalar is kept as its text.
#pragma once

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace infini::rendezvous::etcd {

class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class JsonValue {
 public:
  enum class Kind { kNull, kScalar, kArray, kObject };

  // Throws JsonError on malformed text.
  static JsonValue Parse(const std::string& text);

  Kind kind() const { return kind_; }
  // A member of an object; a null value when absent (the gateway omits
  // fields that hold their default).
  const JsonValue& operator[](const std::string& name) const;
  const std::vector<JsonValue>& items() const { return items_; }
  // The scalar's text ("" for null); strings unescaped.
  const std::string& text() const { return text_; }
  bool has(const std::string& name) const { return members_.count(name) > 0; }
  // The scalar as an integer, `fallback` when absent.
  long long AsInt(long long fallback = 0) const;
  bool AsBool() const { return text_ == "true"; }

 private:
  friend class JsonParser;
  Kind kind_ = Kind::kNull;
  std::string text_;
  std::vector<JsonValue> items_;
  std::map<std::string, JsonValue> members_;
};

// `text` as a JSON string literal, quotes included.
std::string JsonQuote(const std::string& text);

}  // namespace infini::rendezvous::etcd
