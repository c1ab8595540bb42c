#include "errors.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>

#include <exception>
#include <new>
#include <string>
#include <system_error>

#include "infini/rendezvous/store.h"

namespace infini::gloo_backend {
namespace {

thread_local std::string last_error;

// gloo reports a deadline that passed as an IoException whose text starts
// with "Timed out"; everything else it raises on a pair is a peer problem.
infiniCclResult_t ClassifyIoError(const std::string& text) {
  if (text.find("Timed out") != std::string::npos || text.find("timed out") != std::string::npos ||
      text.find("Connect timeout") != std::string::npos) {
    return infiniCclTimeout;
  }
  return infiniCclRemoteError;
}

}  // namespace

const char* LastError() { return last_error.c_str(); }

infiniCclResult_t Fail(infiniCclResult_t code, std::string message) {
  // One line: newlines inside gloo's or the store's text would break logs.
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  last_error = std::move(message);
  return code;
}

infiniCclResult_t TranslateCurrentException(const char* call) {
  const std::string prefix = std::string(call) + ": ";
  try {
    throw;
  } catch (const PluginError& e) {
    return Fail(e.code(), prefix + e.what());
  } catch (const ::gloo::IoException& e) {
    return Fail(ClassifyIoError(e.what()), prefix + "gloo I/O error: " + e.what());
  } catch (const ::gloo::InvalidOperationException& e) {
    return Fail(infiniCclInvalidUsage, prefix + "gloo refused the operation: " + e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    return Fail(infiniCclInternalError, prefix + "gloo check failed: " + e.what());
  } catch (const ::gloo::Exception& e) {
    return Fail(infiniCclInternalError, prefix + "gloo error: " + e.what());
  } catch (const rendezvous::StoreTimeoutError& e) {
    return Fail(infiniCclTimeout, prefix + "rendezvous store timed out: " + e.what());
  } catch (const rendezvous::StoreError& e) {
    return Fail(infiniCclRemoteError, prefix + "rendezvous store failed: " + e.what());
  } catch (const std::bad_alloc&) {
    return Fail(infiniCclSystemError, prefix + "out of host memory");
  } catch (const std::system_error& e) {
    return Fail(infiniCclSystemError, prefix + e.what());
  } catch (const std::exception& e) {
    return Fail(infiniCclInternalError, prefix + e.what());
  } catch (...) {
    return Fail(infiniCclInternalError, prefix + "unknown exception");
  }
}

}  // namespace infini::gloo_backend
