// framework::CclImpl over InfiniCCL: what replaces a framework's
// nccl_impl.cc. Each call is one ccl:: call on raw pointers, with the
// framework's enums translated; no state of its own (docs/adopting.md).
#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework_ccl.h"
#include "infini/ccl/ccl.h"
#include "infini/ccl/device_backends.h"

namespace framework {
namespace {

namespace ccl = infini::ccl;

// In the order of framework::DataType and framework::ReduceOpType.
namespace dt = ccl::dtype;
constexpr DLDataType kBool{INFINI_CCL_DL_BOOL, 8, 1};
constexpr std::array<DLDataType, 13> kDataTypes = {
    kBool,       dt::kUInt8, dt::kInt8,     dt::kUInt16,  dt::kInt16,   dt::kUInt32, dt::kInt32,
    dt::kUInt64, dt::kInt64, dt::kBFloat16, dt::kFloat16, dt::kFloat32, dt::kFloat64};
using Op = ccl::ReduceOp;
constexpr std::array<Op, 5> kReduceOps = {Op::kSum, Op::kProd, Op::kMin, Op::kMax, Op::kAvg};

// std::array::at throws std::out_of_range for a value outside the enum.
DLDataType ToDl(DataType dtype) { return kDataTypes.at(static_cast<size_t>(dtype)); }
ccl::ReduceOp ToCcl(ReduceOpType op) { return kReduceOps.at(static_cast<size_t>(op)); }

CclStatus ToStatus(infiniCclResult_t result) {
  switch (result) {
    case infiniCclSuccess:
      return CclStatus::kSuccess;
    case infiniCclInProgress:
      return CclStatus::kInProgress;
    case infiniCclTimeout:
      return CclStatus::kTimeout;
    case infiniCclInvalidArgument:
    case infiniCclInvalidUsage:
      return CclStatus::kInvalidArgument;
    case infiniCclRemoteError:
    case infiniCclAborted:
      return CclStatus::kUnavailable;
    case infiniCclUnsupported:
      return CclStatus::kNotSupported;
    case infiniCclInternalError:
      return CclStatus::kInternal;
    default:
      return CclStatus::kError;
  }
}

class Comm final : public CclComm {
 public:
  ccl::Communicator communicator;
};

class UniqueId final : public CclUniqueId {
 public:
  explicit UniqueId(ccl::UniqueId id) : id_(std::move(id)) {}
  size_t Size() const override { return id_.size(); }
  const void* Data() const override { return id_.bytes().data(); }
  void Load(const void* src, size_t size) override {
    if (size != id_.size()) {
      throw std::invalid_argument("unique id of " + std::to_string(size) + " bytes, expected " +
                                  std::to_string(id_.size()));
    }
    id_ = ccl::UniqueId(std::string(static_cast<const char*>(src), size));
  }
  const ccl::UniqueId& id() const { return id_; }

 private:
  ccl::UniqueId id_;
};

ccl::Communicator& Of(const CclComm* comm) {
  auto* ours = dynamic_cast<const Comm*>(comm);
  if (ours == nullptr) throw std::invalid_argument("not a communicator of the InfiniCCL CclImpl");
  return const_cast<Comm*>(ours)->communicator;
}

const ccl::UniqueId& Of(const CclUniqueId& id) {
  auto* ours = dynamic_cast<const UniqueId*>(&id);
  if (ours == nullptr) throw std::invalid_argument("not a unique id of the InfiniCCL CclImpl");
  return ours->id();
}

class InfiniCclImpl final : public CclImpl {
 public:
  explicit InfiniCclImpl(std::shared_ptr<const ccl::Backend> backend)
      : backend_(std::move(backend)) {}

  // A CommInitRank in between is made at the outermost GroupEnd, with the
  // group's other local ranks (Backend::CommInitRank, docs/adopting.md).
  void GroupStart() const override { backend_->GroupStart(); }
  void GroupEnd() const override { backend_->GroupEnd(); }

  void GetAsyncError(const CclComm* comm, CclStatus* async_error) const override {
    const infiniCclResult_t result = Of(comm).GetAsyncError();
    if (async_error != nullptr) *async_error = ToStatus(result);
  }

  void GetUniqueId(CclUniqueId** unique_id) const override {
    if (*unique_id == nullptr) {
      *unique_id = new UniqueId(backend_->GetUniqueId());
    } else {
      const ccl::UniqueId id = backend_->GetUniqueId();
      (*unique_id)->Load(id.bytes().data(), id.size());
    }
  }

  void CommInitAll(CclComm** comms, int ndev, const int* devlist) const override {
    std::vector<ccl::Communicator> made =
        backend_->CommInitAll(std::span<const int>(devlist, static_cast<size_t>(ndev)));
    for (int i = 0; i < ndev; ++i) {
      auto* comm = new Comm;
      comm->communicator = std::move(made[static_cast<size_t>(i)]);
      comms[i] = comm;
    }
  }

  void CommInitRank(CclComm** comm, int nranks, const CclUniqueId& unique_id,
                    int rank) const override {
    auto* made = new Comm;
    made->communicator = backend_->CommInitRank(nranks, Of(unique_id), rank);
    *comm = made;
  }

  void CommDestroy(CclComm* comm) const override { Of(comm).Destroy(); }

  void AllReduce(const void* sendbuff, void* recvbuff, size_t count, DataType dtype,
                 ReduceOpType reduce_op, const CclComm* comm, StreamHandle stream) const override {
    Of(comm).AllReduce(sendbuff, recvbuff, count, ToDl(dtype), ToCcl(reduce_op), Wrap(stream));
  }

  void Broadcast(const void* sendbuff, void* recvbuff, size_t count, DataType dtype, int root,
                 const CclComm* comm, StreamHandle stream) const override {
    Of(comm).Broadcast(sendbuff, recvbuff, count, ToDl(dtype), root, Wrap(stream));
  }

  void Reduce(const void* sendbuff, void* recvbuff, size_t count, DataType dtype,
              ReduceOpType reduce_op, int root, const CclComm* comm,
              StreamHandle stream) const override {
    Of(comm).Reduce(sendbuff, recvbuff, count, ToDl(dtype), ToCcl(reduce_op), root, Wrap(stream));
  }

  void AllGather(const void* sendbuff, void* recvbuff, size_t count, DataType dtype,
                 const CclComm* comm, StreamHandle stream) const override {
    Of(comm).AllGather(sendbuff, recvbuff, count, ToDl(dtype), Wrap(stream));
  }

  void ReduceScatter(const void* sendbuff, void* recvbuff, size_t recv_count, DataType dtype,
                     ReduceOpType reduce_op, const CclComm* comm,
                     StreamHandle stream) const override {
    Of(comm).ReduceScatter(sendbuff, recvbuff, recv_count, ToDl(dtype), ToCcl(reduce_op),
                           Wrap(stream));
  }

  void Send(const void* buff, size_t count, DataType dtype, int peer, const CclComm* comm,
            StreamHandle stream) const override {
    Of(comm).Send(buff, count, ToDl(dtype), peer, Wrap(stream));
  }

  void Recv(void* buff, size_t count, DataType dtype, int peer, const CclComm* comm,
            StreamHandle stream) const override {
    Of(comm).Recv(buff, count, ToDl(dtype), peer, Wrap(stream));
  }

 private:
  ccl::Stream Wrap(StreamHandle stream) const {
    return ccl::Stream::Wrap(backend_, static_cast<infiniCclStream_t>(stream));
  }

  std::shared_ptr<const ccl::Backend> backend_;
};

}  // namespace

std::unique_ptr<CclImpl> MakeInfiniCclImpl(std::string_view backend_spec) {
  return std::make_unique<InfiniCclImpl>(ccl::Backend::Load(backend_spec));
}

std::unique_ptr<CclImpl> MakeInfiniCclImplFor(std::string_view backend_spec,
                                              int dlpack_device_type) {
  const DLDevice device{static_cast<DLDeviceType>(dlpack_device_type), 0};
  return std::make_unique<InfiniCclImpl>(ccl::DeviceBackends::Load(backend_spec).For(device));
}

}  // namespace framework
