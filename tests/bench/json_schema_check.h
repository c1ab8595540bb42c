// For the tests: a checker for the subset of JSON Schema that
// tests/bench/nccl_tests_schema.json uses: type (a name or a list),
// required, properties, items, enum, minimum, $ref to its definitions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace infini::bench::testing {

using Json = nlohmann::json;

// `text` parsed; throws nlohmann::json::parse_error when it is not JSON.
inline Json ParseJson(const std::string& text) { return Json::parse(text); }

// Every way `document` breaks `schema`, one line each with the JSON path
// ("$.results[0].root: expected string, got number"); empty when it fits.
std::vector<std::string> SchemaViolations(const Json& schema, const Json& document);

std::string ReadFile(const std::string& path);

}  // namespace infini::bench::testing
