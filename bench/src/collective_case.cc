#include "collective_case.h"

#include <algorithm>
#include <iostream>
#include <stdexcept>
#include <vector>

#include "infini/conformance/reference.h"

namespace infini::bench {
namespace {

namespace reference = infini::conformance;

// What the input values are for: the reduction, or data only moved.
reference::Purpose PurposeOf(const CaseSpec& spec) {
  return ccl::IsReduction(spec.collective) ? reference::Purpose(spec.op) : std::nullopt;
}

// What `rank` must hold in its receive view; empty when the output is
// unspecified (reduce off the root).
std::vector<double> ExpectedOutput(const CaseSpec& spec, const BufferPlan& plan, int rank,
                                   int world_size) {
  const int64_t chunk = plan.chunk_elements;
  switch (spec.collective) {
    case Collective::kAllReduce:
      return reference::ExpectAllReduce(spec.dtype, spec.op, world_size, plan.recv_elements);
    case Collective::kReduce:
      if (rank != spec.root) return {};
      return reference::ExpectAllReduce(spec.dtype, spec.op, world_size, plan.recv_elements);
    case Collective::kBroadcast:
      return reference::ExpectBroadcast(spec.dtype, world_size, spec.root, plan.recv_elements);
    case Collective::kAllGather:
      return reference::ExpectAllGather(spec.dtype, world_size, chunk);
    case Collective::kReduceScatter:
      return reference::ExpectReduceScatter(spec.dtype, spec.op, world_size, rank, chunk);
    case Collective::kAllToAll:
      return reference::ExpectAllToAll(spec.dtype, world_size, rank, chunk);
    case Collective::kSend:  // the ring: from the previous rank
      return reference::ExpectReceived(spec.dtype, world_size, (rank + world_size - 1) % world_size,
                                       plan.recv_elements);
    default:
      break;
  }
  return {};
}

}  // namespace

std::string CaseName(const CaseSpec& spec, int world_size) {
  const size_t element_bytes = ccl::ElementBytes(spec.dtype);
  const BufferPlan plan =
      PlanBuffers(spec.collective, spec.requested_bytes, element_bytes, world_size);
  std::string name =
      std::string(BenchCollectiveName(spec.collective)) + "/" + ccl::DataTypeName(spec.dtype) + "/";
  if (ccl::IsReduction(spec.collective)) name += std::string(ccl::ReduceOpName(spec.op)) + "/";
  name += spec.in_place ? "in_place/" : "out_of_place/";
  return name + "bytes:" + std::to_string(plan.bytes);
}

CollectiveCase::CollectiveCase(const CaseSpec& spec, const RankResources& rank)
    : spec_(spec),
      rank_(rank),
      world_size_(rank.case_world_size()),
      global_rank_(rank.case_rank()),
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
  // A window is collective: every rank registers the same buffers in the
  // same order, as every rank builds the same cases.
  const auto register_buffer = [&](const ccl::DeviceBuffer& buffer) {
    const ccl::Communicator& communicator = rank.case_communicator();
    return spec.registration == 2 ? communicator.RegisterWindow(buffer.data(), buffer.bytes())
                                  : communicator.Register(buffer.data(), buffer.bytes());
  };
  if (spec.registration > 0) {
    send_registration_ = register_buffer(send_);
    if (!spec.in_place) recv_registration_ = register_buffer(recv_);
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
    const std::vector<unsigned char> encoded = reference::Encode(
        spec_.dtype, reference::InputValues(spec_.dtype, PurposeOf(spec_), global_rank_,
                                            world_size_, first, count));
    send_.CopyFromHost(encoded.data(), encoded.size(),
                       static_cast<size_t>(SendOffset() + first) * element_bytes);
  }
}

void CollectiveCase::Launch() const {
  const ccl::Communicator& comm = rank_.case_communicator();
  const ccl::Stream& stream = rank_.stream;
  const ccl::FlatTensor send = SendTensor();
  const ccl::FlatTensor recv = RecvTensor();
  switch (spec_.collective) {
    case Collective::kAllReduce:
      return comm.AllReduce(send, recv, spec_.op, stream);
    case Collective::kAllGather:
      return comm.AllGather(send, recv, stream);
    case Collective::kReduceScatter:
      return comm.ReduceScatter(send, recv, spec_.op, stream);
    case Collective::kBroadcast:
      return comm.Broadcast(send, recv, spec_.root, stream);
    case Collective::kReduce:
      return comm.Reduce(send, recv, spec_.op, spec_.root, stream);
    case Collective::kAllToAll:
      return comm.AllToAll(send, recv, stream);
    case Collective::kSend:
      return SendRecvRing(send, recv);
    default:
      throw std::logic_error("ccl_bench has no case for " +
                             std::string(BenchCollectiveName(spec_.collective)));
  }
}

void CollectiveCase::SendRecvRing(const ccl::FlatTensor& send, const ccl::FlatTensor& recv) const {
  // Ring neighbours: send to the next rank, receive from the previous.
  const ccl::Communicator& comm = rank_.case_communicator();
  const ccl::Stream& stream = rank_.stream;
  const int next = (global_rank_ + 1) % world_size_;
  const int previous = (global_rank_ + world_size_ - 1) % world_size_;
  const ccl::Backend& backend = rank_.backend();
  if (backend.capabilities().group()) {
    backend.GroupStart();
    comm.Send(send, next, stream);
    comm.Recv(recv, previous, stream);
    backend.GroupEnd();
    return;
  }
  // Without group entries, blocking sends must not all wait at once: even
  // ranks send first, odd ranks receive first.
  if (global_rank_ % 2 == 0) {
    comm.Send(send, next, stream);
    comm.Recv(recv, previous, stream);
  } else {
    comm.Recv(recv, previous, stream);
    comm.Send(send, next, stream);
  }
}

int64_t CollectiveCase::CountWrongElements() const {
  const std::vector<double> expected = ExpectedOutput(spec_, plan_, global_rank_, world_size_);
  if (expected.empty()) return 0;  // unspecified output (reduce off the root)
  const size_t element_bytes = ccl::ElementBytes(spec_.dtype);
  const ccl::DeviceBuffer& buffer = spec_.in_place ? send_ : recv_;
  std::vector<unsigned char> host(static_cast<size_t>(plan_.recv_elements) * element_bytes);
  buffer.CopyToHost(host.data(), host.size(), static_cast<size_t>(RecvOffset()) * element_bytes);
  const reference::Comparison comparison = reference::Compare(
      spec_.dtype, PurposeOf(spec_), world_size_, expected,
      reference::Decode(spec_.dtype, host.data(), static_cast<size_t>(plan_.recv_elements)));
  if (!comparison.ok()) {
    std::cerr << "ccl_bench: --check: " << CaseName(spec_, world_size_) << " on rank "
              << global_rank_ << ": " << comparison.Describe() << "\n";
  }
  return comparison.wrong;
}

}  // namespace infini::bench
