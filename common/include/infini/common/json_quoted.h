// A string as JSON text, quotes included, for the code that writes JSON a
// line at a time (the trace files, the trace merge, etcd's request bodies).
// nlohmann/json escapes it; bytes that are not UTF-8 become U+FFFD, so the
// line stays JSON (a writer of traces must never throw). Not installed:
// link infini_common_json privately.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace infini {

inline std::string JsonQuoted(std::string_view text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace infini
