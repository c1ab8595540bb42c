#include "infini/ccl/error.h"

#include "infini/common/one_line.h"

namespace infini::ccl {

Error::Error(infiniCclResult_t code, const std::string& message)
    : std::runtime_error(OneLine(message)), code_(code) {}

LoadError::LoadError(const std::string& message) : std::runtime_error(OneLine(message)) {}

const char* ResultName(infiniCclResult_t result) {
  switch (result) {
    case infiniCclSuccess:
      return "infiniCclSuccess";
    case infiniCclUnhandledDeviceError:
      return "infiniCclUnhandledDeviceError";
    case infiniCclSystemError:
      return "infiniCclSystemError";
    case infiniCclInternalError:
      return "infiniCclInternalError";
    case infiniCclInvalidArgument:
      return "infiniCclInvalidArgument";
    case infiniCclInvalidUsage:
      return "infiniCclInvalidUsage";
    case infiniCclRemoteError:
      return "infiniCclRemoteError";
    case infiniCclInProgress:
      return "infiniCclInProgress";
    case infiniCclTimeout:
      return "infiniCclTimeout";
    case infiniCclAborted:
      return "infiniCclAborted";
    case infiniCclUnsupported:
      return "infiniCclUnsupported";
    case infiniCclNumResults:
      break;
  }
  return "infiniCclUnknownResult";
}

}  // namespace infini::ccl
