// broadcast, all_gather, all_to_all, gather, scatter and barrier on gloo's
// algorithms. They only move bytes, so they serve every movable type.
#include <gloo/allgather.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/scatter.h>

#include <cstring>
#include <memory>
#include <vector>

#include "collectives.h"
#include "element_type.h"
#include "errors.h"
#include "reduce_kernels.h"

namespace infini::gloo_backend {
namespace {

void AllGatherElements(Communicator& comm, const void* sendbuff, void* recvbuff, size_t sendcount,
                       size_t element_bytes) {
  if (sendcount == 0) return;
  const size_t block_bytes = sendcount * element_bytes;
  // NCCL's in-place layout: rank r's input already sits at block r of the
  // output. Otherwise put it there, then gather in place.
  auto* own_block = static_cast<unsigned char*>(recvbuff) + comm.rank() * block_bytes;
  if (own_block != sendbuff) std::memmove(own_block, sendbuff, block_bytes);
  if (comm.world_size() == 1) return;
  WithOpaqueElement(element_bytes, [&]<class E>() {
    ::gloo::AllgatherOptions options(comm.context());
    options.setOutput(static_cast<E*>(recvbuff), sendcount * comm.world_size());
    options.setTag(comm.NextCollectiveTag(
        Communicator::Agreement({infiniCclCollAllGather, sendcount * element_bytes})));
    options.setTimeout(comm.timeout());
    ::gloo::allgather(options);
  });
}

}  // namespace

void Broadcast(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
               DLDataType dtype, int root) {
  if (count == 0) return;
  const size_t element_bytes = MovableElementBytes(dtype);
  const bool is_root = comm.rank() == root;
  if (comm.world_size() == 1) {
    if (recvbuff != sendbuff) std::memmove(recvbuff, sendbuff, count * element_bytes);
    return;
  }
  WithOpaqueElement(element_bytes, [&]<class E>() {
    ::gloo::BroadcastOptions options(comm.context());
    // Only the root has an input; non-roots' sendbuff is ignored, as in NCCL.
    if (is_root && sendbuff != recvbuff) {
      options.setInput(const_cast<E*>(static_cast<const E*>(sendbuff)), count);
    }
    options.setOutput(static_cast<E*>(recvbuff), count);
    options.setRoot(root);
    options.setTag(comm.NextCollectiveTag(Communicator::Agreement(
        {infiniCclCollBroadcast, count * element_bytes, static_cast<uint64_t>(root)})));
    options.setTimeout(comm.timeout());
    ::gloo::broadcast(options);
  });
}

void AllGather(Communicator& comm, const void* sendbuff, void* recvbuff, size_t sendcount,
               DLDataType dtype) {
  AllGatherElements(comm, sendbuff, recvbuff, sendcount, MovableElementBytes(dtype));
}

void AllGatherBytes(Communicator& comm, const void* sendbuff, void* recvbuff,
                    size_t bytes_per_rank) {
  AllGatherElements(comm, sendbuff, recvbuff, bytes_per_rank, 1);
}

void AllToAll(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
              DLDataType dtype) {
  if (count == 0) return;
  const size_t element_bytes = MovableElementBytes(dtype);
  const size_t total_bytes = count * element_bytes * comm.world_size();
  // gloo reads the input while writing the output: an in-place call works
  // on a copy of the input.
  std::unique_ptr<unsigned char[]> input_copy;
  const void* input = sendbuff;
  if (sendbuff == recvbuff) {
    input_copy.reset(new unsigned char[total_bytes]);
    std::memcpy(input_copy.get(), sendbuff, total_bytes);
    input = input_copy.get();
  }
  if (comm.world_size() == 1) {
    std::memcpy(recvbuff, input, total_bytes);
    return;
  }
  WithOpaqueElement(element_bytes, [&]<class E>() {
    ::gloo::AlltoallOptions options(comm.context());
    const size_t elements = count * comm.world_size();
    options.setInput(const_cast<E*>(static_cast<const E*>(input)), elements);
    options.setOutput(static_cast<E*>(recvbuff), elements);
    options.setTag(comm.NextCollectiveTag(
        Communicator::Agreement({infiniCclCollAllToAll, count * element_bytes})));
    options.setTimeout(comm.timeout());
    ::gloo::alltoall(options);
  });
}

void Gather(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
            DLDataType dtype, int root) {
  if (count == 0) return;
  const size_t element_bytes = MovableElementBytes(dtype);
  const size_t block_bytes = count * element_bytes;
  const bool is_root = comm.rank() == root;
  if (comm.world_size() == 1) {
    if (recvbuff != sendbuff) std::memmove(recvbuff, sendbuff, block_bytes);
    return;
  }
  WithOpaqueElement(element_bytes, [&]<class E>() {
    ::gloo::GatherOptions options(comm.context());
    // The root's own block is copied by gloo; in place it is already there.
    options.setInput(const_cast<E*>(static_cast<const E*>(sendbuff)), count);
    if (is_root) options.setOutput(static_cast<E*>(recvbuff), count * comm.world_size());
    options.setRoot(root);
    options.setTag(comm.NextCollectiveTag(
        Communicator::Agreement({infiniCclCollGather, block_bytes, static_cast<uint64_t>(root)})));
    options.setTimeout(comm.timeout());
    ::gloo::gather(options);
  });
}

void Scatter(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
             DLDataType dtype, int root) {
  if (count == 0) return;
  const size_t element_bytes = MovableElementBytes(dtype);
  const size_t block_bytes = count * element_bytes;
  const bool is_root = comm.rank() == root;
  if (comm.world_size() == 1) {
    if (recvbuff != sendbuff) std::memmove(recvbuff, sendbuff, block_bytes);
    return;
  }
  WithOpaqueElement(element_bytes, [&]<class E>() {
    ::gloo::ScatterOptions options(comm.context());
    if (is_root) {
      std::vector<E*> blocks;
      auto* first = const_cast<E*>(static_cast<const E*>(sendbuff));
      for (int rank = 0; rank < comm.world_size(); ++rank) blocks.push_back(first + rank * count);
      options.setInputs(blocks, count);
    }
    options.setOutput(static_cast<E*>(recvbuff), count);
    options.setRoot(root);
    options.setTag(comm.NextCollectiveTag(
        Communicator::Agreement({infiniCclCollScatter, block_bytes, static_cast<uint64_t>(root)})));
    options.setTimeout(comm.timeout());
    ::gloo::scatter(options);
  });
}

void Barrier(Communicator& comm) {
  if (comm.world_size() == 1) return;
  ::gloo::BarrierOptions options(comm.context());
  options.setTag(comm.NextCollectiveTag(Communicator::Agreement({infiniCclCollBarrier})));
  options.setTimeout(comm.timeout());
  ::gloo::barrier(options);
}

}  // namespace infini::gloo_backend
