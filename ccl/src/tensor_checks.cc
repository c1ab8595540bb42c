#include "tensor_checks.h"

#include <stdexcept>
#include <string>

#include "infini/ccl/dtype.h"
#include "infini/ccl/error.h"

namespace infini::ccl::internal {
namespace {

[[noreturn]] void Refuse(const TensorCheck& check, const std::string& why) {
  throw Error(infiniCclInvalidArgument, std::string(check.operation) + ": " + why);
}

}  // namespace

size_t CheckTensor(const TensorCheck& check, std::string_view role, const DLTensor& tensor) {
  const std::string name(role);
  if (tensor.data == nullptr && NumElements(tensor) > 0) {
    Refuse(check, name + " tensor has no data pointer");
  }
  if (!IsContiguous(tensor)) {
    Refuse(check, name + " tensor is not contiguous (make it contiguous before communicating)");
  }
  if (tensor.dtype.lanes != 1) {
    Refuse(check, name + " tensor has " + std::to_string(tensor.dtype.lanes) +
                      " lanes per element, expected 1");
  }
  if (tensor.device.device_type != check.backend_device_type) {
    Refuse(check, name + " tensor is on " + DeviceName(tensor.device) + ", this backend needs " +
                      DeviceName(DLDevice{check.backend_device_type, tensor.device.device_id}) +
                      " memory");
  }
  const int64_t count = NumElements(tensor);
  if (count < 0) Refuse(check, name + " tensor has a negative extent");
  return static_cast<size_t>(count);
}

void CheckSameType(const TensorCheck& check, const DLTensor& send, const DLTensor& recv) {
  if (send.dtype != recv.dtype) {
    Refuse(check, "send tensor is " + DataTypeName(send.dtype) + " but recv tensor is " +
                      DataTypeName(recv.dtype) + "; they must match");
  }
  if (send.device.device_id != recv.device.device_id) {
    Refuse(check, "send tensor is on " + DeviceName(send.device) + " but recv tensor is on " +
                      DeviceName(recv.device) + "; they must be on one device");
  }
}

size_t CheckPair(const TensorCheck& check, const DLTensor& send, const DLTensor& recv,
                 Collective collective) {
  const size_t send_count = CheckTensor(check, "send", send);
  const size_t recv_count = CheckTensor(check, "recv", recv);
  CheckSameType(check, send, recv);
  const auto world_size = static_cast<size_t>(check.world_size);
  const std::string world = "world_size (" + std::to_string(world_size) + ")";
  switch (CountRuleOf(collective)) {
    case CountRule::kWholeBuffer:
    case CountRule::kPerPeer:  // all_to_all: world x count on both sides
      if (recv_count != send_count) {
        Refuse(check, "recv tensor has " + std::to_string(recv_count) +
                          " elements, expected the same number as send (" +
                          std::to_string(send_count) + ")");
      }
      break;
    case CountRule::kPerRankSend:
      if (recv_count != send_count * world_size) {
        Refuse(check, "recv tensor has " + std::to_string(recv_count) + " elements, expected " +
                          world + " x send elements (" + std::to_string(send_count) +
                          ") = " + std::to_string(send_count * world_size));
      }
      break;
    case CountRule::kPerRankRecv:
      if (send_count != recv_count * world_size) {
        Refuse(check, "send tensor has " + std::to_string(send_count) + " elements, expected " +
                          world + " x recv elements (" + std::to_string(recv_count) +
                          ") = " + std::to_string(recv_count * world_size));
      }
      break;
    case CountRule::kVariable:
    case CountRule::kNoBuffer:
      // Programming error: these have no pair of whole tensors to compare.
      throw std::logic_error("CheckPair: " + std::string(CollectiveName(collective)) +
                             " has no send/recv count rule");
  }
  return send_count;
}

void CheckRank(const TensorCheck& check, std::string_view role, int rank) {
  if (rank < 0 || rank >= check.world_size) {
    Refuse(check, std::string(role) + " " + std::to_string(rank) + " is outside [0, " +
                      std::to_string(check.world_size) + ")");
  }
}

}  // namespace infini::ccl::internal
