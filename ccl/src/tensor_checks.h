// Argument checks done before anything reaches a plugin: a wrong tensor is
// the caller's mistake and gets a message that says which and why.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <string_view>

#include "infini/ccl/collectives.h"

namespace infini::ccl::internal {

// What one collective needs to know about its tensors.
struct TensorCheck {
  std::string_view operation;  // "AllGather"
  DLDeviceType backend_device_type;
  int world_size;
};

// Throws Error(infiniCclInvalidArgument) unless `tensor` is contiguous, has
// one lane, and lives on the backend's device type. Returns its element count.
size_t CheckTensor(const TensorCheck& check, std::string_view role, const DLTensor& tensor);

// Checks send and recv alike, then that they agree in dtype and device and
// that their counts follow `collective`'s count rule (collectives.h: the
// whole-buffer, per-rank and per-peer rules; gather's and scatter's are
// their roots'). Returns the send count.
size_t CheckPair(const TensorCheck& check, const DLTensor& send, const DLTensor& recv,
                 Collective collective);

// Throws unless send and recv agree in dtype and device.
void CheckSameType(const TensorCheck& check, const DLTensor& send, const DLTensor& recv);

// Throws unless 0 <= rank < world_size; `role` is "root" or "peer".
void CheckRank(const TensorCheck& check, std::string_view role, int rank);

}  // namespace infini::ccl::internal
