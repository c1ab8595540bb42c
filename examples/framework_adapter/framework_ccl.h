// A framework's own communication interface, shaped like NCCL and like
// InfiniTrain's core::CclImpl (infini_train/include/core/ccl/ccl.h): raw
// device buffers with a count, the framework's own element types and
// reduction operators, opaque communicators and unique ids, NCCL's
// GroupStart / CommInitRank per local device / GroupEnd, CommInitAll for the
// ranks of one process, GetAsyncError. Nothing here names InfiniCCL: the
// framework's code is written against this header, and one implementation of
// it (infini_ccl_impl.cc) puts it on InfiniCCL, as InfiniTrain's nccl_impl.cc
// puts its CclImpl on NCCL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace framework {

// InfiniTrain's DataType (infini_train/include/datatype.h), in its order.
enum class DataType : int8_t {
  kBOOL,
  kUINT8,
  kINT8,
  kUINT16,
  kINT16,
  kUINT32,
  kINT32,
  kUINT64,
  kINT64,
  kBFLOAT16,
  kFLOAT16,
  kFLOAT32,
  kFLOAT64,
};

// InfiniTrain's nn::parallel::function::ReduceOpType.
enum class ReduceOpType : int8_t { kSum, kProd, kMin, kMax, kAvg };

// InfiniTrain's core::CclStatus.
enum class CclStatus : int32_t {
  kSuccess = 0,
  kInProgress = 1,
  kTimeout = 2,
  kError = -1,
  kInvalidArgument = -2,
  kUnavailable = -3,
  kNotSupported = -4,
  kInternal = -5,
};

// Opaque to the framework; each implementation has its own.
class CclComm {
 public:
  virtual ~CclComm() = default;
};

class CclUniqueId {
 public:
  virtual ~CclUniqueId() = default;
  virtual size_t Size() const = 0;
  virtual const void* Data() const = 0;
  virtual void Load(const void* src, size_t size) = 0;
};

// The framework's native stream (a cudaStream_t on CUDA); nullptr is the
// device's default stream.
using StreamHandle = void*;

// Every call reports a failure by throwing (InfiniTrain's NCCL_CHECK ends
// the process instead); the communicators CommInitRank and CommInitAll
// return belong to the caller (delete them; CommDestroy first, or not: see
// CommDestroy).
class CclImpl {
 public:
  virtual ~CclImpl() = default;

  // Nest. Between them, collectives and send/recv of this thread are one
  // group (ncclGroupStart/End), and CommInitRank calls return at once with a
  // communicator that works after the outermost GroupEnd.
  virtual void GroupStart() const = 0;
  virtual void GroupEnd() const = 0;
  virtual void GetAsyncError(const CclComm* comm, CclStatus* async_error) const = 0;
  // Makes *unique_id when it is null.
  virtual void GetUniqueId(CclUniqueId** unique_id) const = 0;
  // Every rank of a group in this process: rank i on devlist[i].
  virtual void CommInitAll(CclComm** comms, int ndev, const int* devlist) const = 0;
  // This rank, on the calling thread's current device.
  virtual void CommInitRank(CclComm** comm, int nranks, const CclUniqueId& unique_id,
                            int rank) const = 0;
  // Frees the vendor's communicator now. Not needed at exit: a communicator
  // still alive when static objects are destroyed is left to the process's
  // end (so a static registry of communicators is safe).
  virtual void CommDestroy(CclComm* comm) const = 0;

  virtual void AllReduce(const void* sendbuff, void* recvbuff, size_t count, DataType dtype,
                         ReduceOpType reduce_op, const CclComm* comm,
                         StreamHandle stream) const = 0;
  // sendbuff matters on the root only (may be nullptr elsewhere).
  virtual void Broadcast(const void* sendbuff, void* recvbuff, size_t count, DataType dtype,
                         int root, const CclComm* comm, StreamHandle stream) const = 0;
  // recvbuff matters on the root only (may be nullptr elsewhere).
  virtual void Reduce(const void* sendbuff, void* recvbuff, size_t count, DataType dtype,
                      ReduceOpType reduce_op, int root, const CclComm* comm,
                      StreamHandle stream) const = 0;
  // count: elements each rank sends; recvbuff holds nranks × count.
  virtual void AllGather(const void* sendbuff, void* recvbuff, size_t count, DataType dtype,
                         const CclComm* comm, StreamHandle stream) const = 0;
  // recv_count: elements each rank receives; sendbuff holds nranks × recv_count.
  virtual void ReduceScatter(const void* sendbuff, void* recvbuff, size_t recv_count,
                             DataType dtype, ReduceOpType reduce_op, const CclComm* comm,
                             StreamHandle stream) const = 0;
  virtual void Send(const void* buff, size_t count, DataType dtype, int peer, const CclComm* comm,
                    StreamHandle stream) const = 0;
  virtual void Recv(void* buff, size_t count, DataType dtype, int peer, const CclComm* comm,
                    StreamHandle stream) const = 0;
};

// The implementation over InfiniCCL on the backend `backend_spec` names
// ("gloo", "nccl", a path; empty: INFINI_CCL_BACKEND, else auto).
std::unique_ptr<CclImpl> MakeInfiniCclImpl(std::string_view backend_spec = {});

// A framework that keeps one implementation per device type (InfiniTrain
// does) and picks one by a tensor's device: the implementation for tensors
// of `dlpack_device_type` (DLPack's code, e.g. 1 for the host) when
// `backend_spec` names a backend per device type, as PyTorch's
// backend="cpu:gloo,cuda:nccl" does. Throws, in one line, for a type the
// spec names no backend for.
std::unique_ptr<CclImpl> MakeInfiniCclImplFor(std::string_view backend_spec,
                                              int dlpack_device_type);

}  // namespace framework
