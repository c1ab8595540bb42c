// The one escaping function for values echoed in error messages.
//
// A user's mistake is reported on one line that names the flag or variable,
// the value and what was expected (docs/architecture.md). A value can hold
// anything, a newline included (`--nproc_per_node=$'2\nx'`), so every layer
// escapes the values it echoes with OneLine before they reach a message.
//
// Header-only and dependency-free: every folder may include it, dataloader/
// and ccl/ too.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace infini {

// Escapes a value so that it prints on one line: "\n", "\r" and "\t" as
// those two characters, any other control byte as "\x07"; everything else
// (backslashes, quotes, UTF-8) is kept. Escaping twice changes nothing more.
inline std::string OneLine(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (unsigned char c : value) {
    if (c == '\n') {
      escaped += "\\n";
    } else if (c == '\r') {
      escaped += "\\r";
    } else if (c == '\t') {
      escaped += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      escaped += hex;
    } else {
      escaped += static_cast<char>(c);
    }
  }
  return escaped;
}

}  // namespace infini
