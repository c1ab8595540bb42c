// A small typed JSON reader: --expect reads a saved run with it (ours or
// nccl-tests'), and the tests read our -J output.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace infini::bench {

struct Json {
  enum class Type { kNull, kBoolean, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  bool integral = false;  // a number written without '.', 'e' or 'E'
  std::string string;
  std::vector<Json> items;
  std::map<std::string, Json> members;

  // A member of an object; null when absent.
  const Json* Find(const std::string& name) const;
};

// Throws std::runtime_error naming the offset of malformed text.
Json ParseJson(const std::string& text);

}  // namespace infini::bench
