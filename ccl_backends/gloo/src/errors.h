// Errors inside the plugin and their translation at the ABI boundary: every
// exported function runs its body through Guarded(), which turns any C++
// exception (ours, gloo's, the store's) into a result code plus a one-line
// explanation kept for the calling thread (get_last_error).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "infini/ccl/plugin_abi.h"

namespace infini::gloo_backend {

// A failure with a known result code, thrown inside the plugin.
class PluginError : public std::runtime_error {
 public:
  PluginError(infiniCclResult_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  infiniCclResult_t code() const { return code_; }

 private:
  infiniCclResult_t code_;
};

// Text of the last failure on this thread ("" if none).
const char* LastError();
// Records `message` as this thread's last error and returns `code`.
infiniCclResult_t Fail(infiniCclResult_t code, std::string message);
// Maps the exception being handled (call inside a catch block) to a result
// code and records its text, prefixed with `call`.
infiniCclResult_t TranslateCurrentException(const char* call);

// Runs `body` (returning infiniCclResult_t); exceptions become result codes.
template <class Body>
infiniCclResult_t Guarded(const char* call, Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (...) {
    return TranslateCurrentException(call);
  }
}

// Throws PluginError(infiniCclInvalidArgument, message) unless `condition`.
inline void RequireArgument(bool condition, const std::string& message) {
  if (!condition) throw PluginError(infiniCclInvalidArgument, message);
}

}  // namespace infini::gloo_backend
