// The one exception type of the C++ API.
#pragma once

#include <stdexcept>
#include <string>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl {

// A failed backend call or a refused argument. what() is one line: the call,
// the result code's name and the plugin's own explanation.
class Error : public std::runtime_error {
 public:
  // Control characters in `message` (a value the user gave, a plugin's
  // text) are escaped, so what() is always one line.
  Error(infiniCclResult_t code, const std::string& message);
  infiniCclResult_t code() const { return code_; }

 private:
  infiniCclResult_t code_;
};

// A backend could not be loaded: not found, not loadable, wrong ABI.
class LoadError : public std::runtime_error {
 public:
  explicit LoadError(const std::string& message);  // escaped as Error's
};

// Stable name of a result code ("infiniCclRemoteError").
const char* ResultName(infiniCclResult_t result);

}  // namespace infini::ccl
