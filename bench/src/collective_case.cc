#include "collective_case.h"

#include <algorithm>
#include <iostream>
#include <vector>

#include "host_reference.h"

namespace infini::bench {
namespace {

bool Reduces(Collective collective) {
  return collective == Collective::kAllReduce || collective == Collective::kReduce ||
         collective == Collective::kReduceScatter;
}

}  // namespace

std::string CaseName(const CaseSpec& spec, int world_size) {
  const size_t element_bytes = ccl::ElementBytes(spec.dtype);
  const BufferPlan plan =
      PlanBuffers(spec.collective, spec.requested_bytes, element_bytes, world_size);
  std::string name =
      std::string(CollectiveName(spec.collective)) + "/" + ccl::DataTypeName(spec.dtype) + "/";
  if (Reduces(spec.collective)) name += std::string(ccl::ReduceOpName(spec.op)) + "/";
  name += spec.in_place ? "in_place/" : "out_of_place/";
  return name + "bytes:" + std::to_string(plan.bytes);
}

CollectiveCase::CollectiveCase(const CaseSpec& spec, const RankResources& rank)
    : spec_(spec),
      rank_(rank),
      world_size_(rank.rank.world_size()),
      global_rank_(rank.rank.global_rank()),
      plan_(PlanBuffers(spec.collective, spec.requested_bytes, ccl::ElementBytes(spec.dtype),
                        world_size_)) {
  const size_t element_bytes = ccl::ElementBytes(spec.dtype);
  const std::shared_ptr<const ccl::Backend>& backend = rank.communicator.backend();
  // In place, one buffer holds the larger of the two views.
  const int64_t send_elements =
      spec.in_place ? std::max(plan_.send_elements, plan_.recv_elements) : plan_.send_elements;
  send_ = ccl::DeviceBuffer(backend, static_cast<size_t>(send_elements) * element_bytes);
  if (!spec.in_place) {
    recv_ = ccl::DeviceBuffer(backend, static_cast<size_t>(plan_.recv_elements) * element_bytes);
  }
  FillInputs();
}

int64_t CollectiveCase::SendOffset() const {
  // In-place all_gather: this rank's chunk of the gathered buffer.
  const bool own_chunk = spec_.in_place && spec_.collective == Collective::kAllGather;
  return own_chunk ? global_rank_ * plan_.chunk_elements : 0;
}

int64_t CollectiveCase::RecvOffset() const {
  // In-place reduce_scatter: this rank's chunk of the reduced buffer.
  const bool own_chunk = spec_.in_place && spec_.collective == Collective::kReduceScatter;
  return own_chunk ? global_rank_ * plan_.chunk_elements : 0;
}

ccl::FlatTensor CollectiveCase::SendTensor() const {
  return send_.AsTensor(spec_.dtype, plan_.send_elements, SendOffset());
}

ccl::FlatTensor CollectiveCase::RecvTensor() const {
  const ccl::DeviceBuffer& buffer = spec_.in_place ? send_ : recv_;
  return buffer.AsTensor(spec_.dtype, plan_.recv_elements, RecvOffset());
}

void CollectiveCase::FillInputs() const {
  // In pieces, so that a 1 GiB buffer does not need 2 GiB of host doubles.
  constexpr int64_t kPieceElements = int64_t{1} << 20;
  const size_t element_bytes = ccl::ElementBytes(spec_.dtype);
  for (int64_t first = 0; first < plan_.send_elements; first += kPieceElements) {
    const int64_t count = std::min(kPieceElements, plan_.send_elements - first);
    const std::vector<unsigned char> encoded = EncodeValues(
        spec_.dtype, InputValues(spec_.dtype, spec_.op, global_rank_, world_size_, count, first));
    send_.CopyFromHost(encoded.data(), encoded.size(),
                       static_cast<size_t>(SendOffset() + first) * element_bytes);
  }
}

void CollectiveCase::Launch() const {
  const ccl::Backend& backend = rank_.backend();
  const ccl::Communicator& comm = rank_.communicator;
  const ccl::Stream& stream = rank_.stream;
  const ccl::FlatTensor send = SendTensor();
  const ccl::FlatTensor recv = RecvTensor();
  switch (spec_.collective) {
    case Collective::kAllReduce:
      return backend.AllReduce(send, recv, spec_.op, comm, stream);
    case Collective::kAllGather:
      return backend.AllGather(send, recv, comm, stream);
    case Collective::kReduceScatter:
      return backend.ReduceScatter(send, recv, spec_.op, comm, stream);
    case Collective::kBroadcast:
      return backend.Broadcast(send, recv, spec_.root, comm, stream);
    case Collective::kReduce:
      return backend.Reduce(send, recv, spec_.op, spec_.root, comm, stream);
    case Collective::kAllToAll:
      return backend.AllToAll(send, recv, comm, stream);
    case Collective::kSendRecv: {
      // Ring neighbours: send to the next rank, receive from the previous.
      backend.GroupStart();
      backend.Send(send, (global_rank_ + 1) % world_size_, comm, stream);
      backend.Recv(recv, (global_rank_ + world_size_ - 1) % world_size_, comm, stream);
      backend.GroupEnd();
      return;
    }
  }
}

int64_t CollectiveCase::CountWrongElements() const {
  const std::vector<double> expected = ExpectedOutput(
      spec_.collective, plan_, spec_.dtype, spec_.op, spec_.root, global_rank_, world_size_);
  if (expected.empty()) return 0;  // unspecified output (reduce off the root)
  const size_t element_bytes = ccl::ElementBytes(spec_.dtype);
  const ccl::DeviceBuffer& buffer = spec_.in_place ? send_ : recv_;
  std::vector<unsigned char> host(static_cast<size_t>(plan_.recv_elements) * element_bytes);
  buffer.CopyToHost(host.data(), host.size(), static_cast<size_t>(RecvOffset()) * element_bytes);
  std::string first_mismatch;
  const int64_t wrong =
      CountMismatches(spec_.dtype, expected,
                      DecodeValues(spec_.dtype, host.data(), plan_.recv_elements), &first_mismatch);
  if (wrong > 0) {
    std::cerr << "ccl_bench: --check: " << CaseName(spec_, world_size_) << " on rank "
              << global_rank_ << ": " << wrong << " wrong elements; " << first_mismatch << "\n";
  }
  return wrong;
}

}  // namespace infini::bench
