#include "registration.h"

#include <nccl.h>

#include <string>

#include "communicator.h"
#include "enqueue.h"
#include "errors.h"
#include "nccl_symbol.h"

namespace infini::ccl::nccl {
namespace {

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 19, 0)
using NcclRegister = ncclResult_t (*)(ncclComm_t, void*, size_t, void**);
using NcclDeregister = ncclResult_t (*)(ncclComm_t, void*);
NcclRegister g_nccl_register = nullptr;
NcclDeregister g_nccl_deregister = nullptr;

infiniCclResult_t CommRegister(infiniCclComm_t comm, void* buffer, size_t bytes, void** handle) {
  CCLCHECK(RequireComm(comm, "comm_register"));
  if (buffer == nullptr || bytes == 0 || handle == nullptr) {
    return Fail(infiniCclInvalidArgument,
                "comm_register: expected a buffer, a byte count above 0 and a handle pointer");
  }
  return CheckNccl(g_nccl_register(comm->nccl, buffer, bytes, handle),
                   "comm_register: ncclCommRegister", comm->nccl);
}

infiniCclResult_t CommDeregister(infiniCclComm_t comm, void* handle) {
  CCLCHECK(RequireComm(comm, "comm_deregister"));
  return CheckNccl(g_nccl_deregister(comm->nccl, handle), "comm_deregister: ncclCommDeregister",
                   comm->nccl);
}
#endif

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
using NcclWindowRegister = ncclResult_t (*)(ncclComm_t, void*, size_t, ncclWindow_t*, int);
using NcclWindowDeregister = ncclResult_t (*)(ncclComm_t, ncclWindow_t);
NcclWindowRegister g_nccl_window_register = nullptr;
NcclWindowDeregister g_nccl_window_deregister = nullptr;

infiniCclResult_t CommWindowRegister(infiniCclComm_t comm, void* buffer, size_t bytes,
                                     uint32_t flags, void** handle) {
  CCLCHECK(RequireComm(comm, "comm_window_register"));
  if (buffer == nullptr || bytes == 0 || handle == nullptr) {
    return Fail(infiniCclInvalidArgument,
                "comm_window_register: expected a buffer, a byte count above 0 and a handle "
                "pointer");
  }
  if ((flags & ~uint32_t{INFINI_CCL_WINDOW_SYMMETRIC}) != 0) {
    return Fail(infiniCclInvalidArgument, "comm_window_register: flags=" + std::to_string(flags) +
                                              ": expected INFINI_CCL_WINDOW_DEFAULT or _SYMMETRIC");
  }
  const int nccl_flags =
      (flags & INFINI_CCL_WINDOW_SYMMETRIC) != 0 ? NCCL_WIN_COLL_SYMMETRIC : NCCL_WIN_DEFAULT;
  ncclWindow_t window = nullptr;
  CCLCHECK(CheckNccl(g_nccl_window_register(comm->nccl, buffer, bytes, &window, nccl_flags),
                     "comm_window_register: ncclCommWindowRegister", comm->nccl));
  *handle = window;
  return infiniCclSuccess;
}

infiniCclResult_t CommWindowDeregister(infiniCclComm_t comm, void* handle) {
  CCLCHECK(RequireComm(comm, "comm_window_deregister"));
  // NCCL succeeds without a window where the communicator has neither
  // symmetric support nor local registration: nothing to end then.
  if (handle == nullptr) return infiniCclSuccess;
  return CheckNccl(g_nccl_window_deregister(comm->nccl, static_cast<ncclWindow_t>(handle)),
                   "comm_window_deregister: ncclCommWindowDeregister", comm->nccl);
}
#endif

}  // namespace

WindowRegistrationEntries CommWindowRegisterIfAvailable() {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  g_nccl_window_register = reinterpret_cast<NcclWindowRegister>(
      NcclSymbol("ncclCommWindowRegister", NCCL_VERSION(2, 27, 0)));
  g_nccl_window_deregister = reinterpret_cast<NcclWindowDeregister>(
      NcclSymbol("ncclCommWindowDeregister", NCCL_VERSION(2, 27, 0)));
  if (g_nccl_window_register != nullptr && g_nccl_window_deregister != nullptr) {
    return {&CommWindowRegister, &CommWindowDeregister};
  }
#endif
  return {};
}

RegistrationEntries CommRegisterIfAvailable() {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 19, 0)
  g_nccl_register =
      reinterpret_cast<NcclRegister>(NcclSymbol("ncclCommRegister", NCCL_VERSION(2, 19, 0)));
  g_nccl_deregister =
      reinterpret_cast<NcclDeregister>(NcclSymbol("ncclCommDeregister", NCCL_VERSION(2, 19, 0)));
  if (g_nccl_register != nullptr && g_nccl_deregister != nullptr) {
    return {&CommRegister, &CommDeregister};
  }
#endif
  return {};
}

}  // namespace infini::ccl::nccl
