// Buffer registration: ncclCommRegister (local) and ncclCommWindowRegister
// (collective windows), resolved from the libnccl loaded at run time as
// the recovery entries are (plugin.cc offers only what these return).
#pragma once

#include <cstddef>
#include <cstdint>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::nccl {

// ncclCommRegister and ncclCommDeregister (NCCL >= 2.19), as one pair: both
// NULL where the header or the library lacks either.
struct RegistrationEntries {
  infiniCclResult_t (*comm_register)(infiniCclComm_t, void*, size_t, void**) = nullptr;
  infiniCclResult_t (*comm_deregister)(infiniCclComm_t, void*) = nullptr;
};
RegistrationEntries CommRegisterIfAvailable();
// ncclCommWindowRegister and ncclCommWindowDeregister (NCCL >= 2.27, as
// nccl-tests' -R 2 requires), the same way.
struct WindowRegistrationEntries {
  infiniCclResult_t (*comm_window_register)(infiniCclComm_t, void*, size_t, uint32_t,
                                            void**) = nullptr;
  infiniCclResult_t (*comm_window_deregister)(infiniCclComm_t, void*) = nullptr;
};
WindowRegistrationEntries CommWindowRegisterIfAvailable();

}  // namespace infini::ccl::nccl
