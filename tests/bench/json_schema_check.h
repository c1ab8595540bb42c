// For the tests: a small typed JSON reader and a checker for the subset of
// JSON Schema that tests/bench/nccl_tests_schema.json uses: type (a name or
// a list), required, properties, items, enum, minimum.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace infini::bench::testing {

struct Json {
  enum class Type { kNull, kBoolean, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  bool integral = false;  // a number written without '.', 'e' or 'E'
  std::string string;
  std::vector<Json> items;
  std::map<std::string, Json> members;

  const Json* Find(const std::string& name) const;
};

// Throws std::runtime_error naming the offset of malformed text.
Json ParseJson(const std::string& text);

// Every way `document` breaks `schema`, one line each with the JSON path
// ("$.results[0].root: expected string, got number"); empty when it fits.
std::vector<std::string> SchemaViolations(const Json& schema, const Json& document);

std::string ReadFile(const std::string& path);

}  // namespace infini::bench::testing
