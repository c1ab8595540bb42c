// all_to_all_v and all_gather_v on gloo's unbound buffers: every transfer
// is posted at its own offset, so any displacements work without packing
// (gloo's alltoallv and allgatherv take packed layouts only).
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "collectives.h"
#include "errors.h"
#include "reduce_kernels.h"
#include "slots.h"

namespace infini::gloo_backend {
namespace {

// Bytes from the start of a buffer to the end of its last block.
size_t ExtentBytes(const size_t* counts, const size_t* displacements, int world_size,
                   size_t element_bytes) {
  size_t extent = 0;
  for (int rank = 0; rank < world_size; ++rank) {
    if (counts[rank] > 0) extent = std::max(extent, displacements[rank] + counts[rank]);
  }
  return extent * element_bytes;
}

// Transfers posted on one unbound buffer, waited for together.
class PostedTransfers {
 public:
  PostedTransfers(Communicator& comm, void* memory, size_t bytes) : comm_(comm) {
    if (bytes > 0) buffer_ = comm.context()->createUnboundBuffer(memory, bytes);
  }
  // Each transfer's slot carries its size (SlotForBytes): ranks that disagree
  // on a block's count end in the timeout, not in an abort inside gloo.
  void Send(int peer, uint64_t slot, size_t offset, size_t bytes) {
    if (bytes == 0) return;
    buffer_->send(peer, SlotForBytes(slot, bytes), offset, bytes);
    ++sends_;
  }
  void Recv(int peer, uint64_t slot, size_t offset, size_t bytes) {
    if (bytes == 0) return;
    buffer_->recv(peer, SlotForBytes(slot, bytes), offset, bytes);
    ++recvs_;
  }
  // Waits for every posted transfer; throws when one failed or was aborted.
  void WaitAll(const char* what) {
    for (; recvs_ > 0; --recvs_) ThrowIfAborted(buffer_->waitRecv(comm_.timeout()), what);
    for (; sends_ > 0; --sends_) ThrowIfAborted(buffer_->waitSend(comm_.timeout()), what);
  }

 private:
  static void ThrowIfAborted(bool completed, const char* what) {
    if (!completed) throw PluginError(infiniCclAborted, std::string(what) + " was aborted");
  }

  Communicator& comm_;
  std::unique_ptr<::gloo::transport::UnboundBuffer> buffer_;
  int sends_ = 0;
  int recvs_ = 0;
};

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* a_begin = static_cast<const unsigned char*>(a);
  const auto* b_begin = static_cast<const unsigned char*>(b);
  return a_bytes > 0 && b_bytes > 0 && a_begin < b_begin + b_bytes && b_begin < a_begin + a_bytes;
}

}  // namespace

void AllToAllV(Communicator& comm, const void* sendbuff, const size_t* sendcounts,
               const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
               const size_t* rdispls, DLDataType dtype) {
  const size_t element_bytes = MovableElementBytes(dtype);
  const int world_size = comm.world_size();
  const int rank = comm.rank();
  const size_t send_extent = ExtentBytes(sendcounts, sdispls, world_size, element_bytes);
  const size_t recv_extent = ExtentBytes(recvcounts, rdispls, world_size, element_bytes);
  if (send_extent == 0 && recv_extent == 0) return;
  // Incoming blocks may land on input not yet sent: work on a copy then.
  std::unique_ptr<unsigned char[]> input_copy;
  const void* input = sendbuff;
  if (Overlap(sendbuff, send_extent, recvbuff, recv_extent)) {
    input_copy.reset(new unsigned char[send_extent]);
    std::memcpy(input_copy.get(), sendbuff, send_extent);
    input = input_copy.get();
  }
  const auto* input_bytes = static_cast<const unsigned char*>(input);
  auto* output_bytes = static_cast<unsigned char*>(recvbuff);
  if (recvcounts[rank] > 0) {
    std::memmove(output_bytes + rdispls[rank] * element_bytes,
                 input_bytes + sdispls[rank] * element_bytes, recvcounts[rank] * element_bytes);
  }
  if (world_size == 1) return;
  const uint64_t slot = MakeSlot(kAllToAllVSlotPrefix, comm.NextCollectiveTag());
  PostedTransfers incoming(comm, recvbuff, recv_extent);
  PostedTransfers outgoing(comm, const_cast<unsigned char*>(input_bytes), send_extent);
  for (int peer = 0; peer < world_size; ++peer) {
    if (peer == rank) continue;
    incoming.Recv(peer, slot, rdispls[peer] * element_bytes, recvcounts[peer] * element_bytes);
  }
  for (int peer = 0; peer < world_size; ++peer) {
    if (peer == rank) continue;
    outgoing.Send(peer, slot, sdispls[peer] * element_bytes, sendcounts[peer] * element_bytes);
  }
  incoming.WaitAll("all_to_all_v receive");
  outgoing.WaitAll("all_to_all_v send");
}

void AllGatherV(Communicator& comm, const void* sendbuff, size_t sendcount, void* recvbuff,
                const size_t* recvcounts, const size_t* rdispls, DLDataType dtype) {
  const size_t element_bytes = MovableElementBytes(dtype);
  const int world_size = comm.world_size();
  const int rank = comm.rank();
  const size_t recv_extent = ExtentBytes(recvcounts, rdispls, world_size, element_bytes);
  if (recv_extent == 0) return;
  auto* own_block = static_cast<unsigned char*>(recvbuff) + rdispls[rank] * element_bytes;
  const size_t send_bytes = sendcount * element_bytes;
  if (send_bytes > 0 && own_block != sendbuff) std::memmove(own_block, sendbuff, send_bytes);
  if (world_size == 1) return;
  const uint64_t slot = MakeSlot(kAllGatherVSlotPrefix, comm.NextCollectiveTag());
  // Sent from the own block of recvbuff: it holds the input in every case.
  PostedTransfers incoming(comm, recvbuff, recv_extent);
  PostedTransfers outgoing(comm, own_block, send_bytes);
  for (int peer = 0; peer < world_size; ++peer) {
    if (peer == rank) continue;
    incoming.Recv(peer, slot, rdispls[peer] * element_bytes, recvcounts[peer] * element_bytes);
  }
  for (int peer = 0; peer < world_size; ++peer) {
    if (peer != rank) outgoing.Send(peer, slot, 0, send_bytes);
  }
  incoming.WaitAll("all_gather_v receive");
  outgoing.WaitAll("all_gather_v send");
}

}  // namespace infini::gloo_backend
