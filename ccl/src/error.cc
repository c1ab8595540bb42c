#include "infini/ccl/error.h"

namespace infini::ccl {

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
