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
  Error(infiniCclResult_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  infiniCclResult_t code() const { return code_; }

 private:
  infiniCclResult_t code_;
};

// A backend could not be loaded: not found, not loadable, wrong ABI.
class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Stable name of a result code ("infiniCclRemoteError").
const char* ResultName(infiniCclResult_t result);

}  // namespace infini::ccl
