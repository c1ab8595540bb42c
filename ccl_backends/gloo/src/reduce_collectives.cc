// all_reduce, reduce and reduce_scatter: gloo's ring all-reduce and reduce
// with our element-wise kernels, and a ring reduce-scatter of our own (gloo
// has none on unbound buffers), also with a size per rank (reduce_scatter_v).
#include <gloo/allreduce.h>
#include <gloo/reduce.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "collectives.h"
#include "element_type.h"
#include "errors.h"
#include "profiler.h"
#include "reduce_kernels.h"
#include "slots.h"

namespace infini::gloo_backend {
namespace {

void CopyIfDistinct(void* destination, const void* source, size_t bytes) {
  if (destination != source) std::memmove(destination, source, bytes);
}

void FinishAverage(infiniCclRedOp_t op, void* data, size_t count, DLDataType dtype,
                   int world_size) {
  if (op == infiniCclAvg) DivideByWorldSize(data, count, dtype, world_size);
}

void ThrowIfNotCompleted(bool completed, const char* what) {
  if (!completed) throw PluginError(infiniCclAborted, std::string(what) + " was aborted");
}

}  // namespace

void AllReduce(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
               DLDataType dtype, infiniCclRedOp_t op) {
  if (count == 0) return;
  const size_t element_bytes = ElementBytes(dtype);
  const ReduceFunction reduce = FindReduceFunction(dtype, op);
  const bool alone = comm.world_size() == 1;
  const ReportedCollective reported(
      comm, "all_reduce", alone ? kLocalCopyAlgorithm : kRingAlgorithm, count * element_bytes);
  if (alone) {
    CopyIfDistinct(recvbuff, sendbuff, count * element_bytes);
  } else {
    WithOpaqueElement(element_bytes, [&]<class E>() {
      ::gloo::AllreduceOptions options(comm.context());
      // Named, not gloo's default: the profiler reports this choice.
      options.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
      // No input means in place: gloo reduces the output buffer.
      if (sendbuff != recvbuff)
        options.setInput(const_cast<E*>(static_cast<const E*>(sendbuff)), count);
      options.setOutput(static_cast<E*>(recvbuff), count);
      options.setReduceFunction(reduce);
      options.setTag(comm.NextCollectiveTag(Communicator::Agreement(
          {infiniCclCollAllReduce, count, element_bytes, static_cast<uint64_t>(op)})));
      options.setTimeout(comm.timeout());
      ::gloo::allreduce(options);
    });
  }
  FinishAverage(op, recvbuff, count, dtype, comm.world_size());
}

void Reduce(Communicator& comm, const void* sendbuff, void* recvbuff, size_t count,
            DLDataType dtype, infiniCclRedOp_t op, int root) {
  if (count == 0) return;
  const size_t element_bytes = ElementBytes(dtype);
  const ReduceFunction reduce = FindReduceFunction(dtype, op);
  const bool is_root = comm.rank() == root;
  if (comm.world_size() == 1) {
    CopyIfDistinct(recvbuff, sendbuff, count * element_bytes);
  } else {
    // gloo's ring leaves partial sums in every rank's output; NCCL promises
    // that a non-root's recvbuff is untouched, so non-roots reduce into
    // scratch memory.
    std::unique_ptr<unsigned char[]> scratch;
    void* output = recvbuff;
    if (!is_root) {
      scratch.reset(new unsigned char[count * element_bytes]);
      output = scratch.get();
    }
    WithOpaqueElement(element_bytes, [&]<class E>() {
      ::gloo::ReduceOptions options(comm.context());
      if (sendbuff != output)
        options.setInput(const_cast<E*>(static_cast<const E*>(sendbuff)), count);
      options.setOutput(static_cast<E*>(output), count);
      options.setRoot(root);
      options.setReduceFunction(reduce);
      options.setTag(comm.NextCollectiveTag(
          Communicator::Agreement({infiniCclCollReduce, count, element_bytes,
                                   static_cast<uint64_t>(op), static_cast<uint64_t>(root)})));
      options.setTimeout(comm.timeout());
      ::gloo::reduce(options);
    });
  }
  if (is_root) FinishAverage(op, recvbuff, count, dtype, comm.world_size());
}

namespace {

// Rank p's block of every rank's input: `count` elements at `offset_bytes`.
struct Block {
  size_t offset_bytes;
  size_t count;
};

// Ring: in step s, rank r passes the partial result of block r-s-1 to its
// right neighbour and folds its own input into block r-s-2 coming from the
// left; after world_size-1 steps block r is complete on rank r. Partial
// results alternate between two scratch slots so the one being sent is
// never overwritten. Empty blocks are neither sent nor received (every rank
// knows every block's size).
void RingReduceScatter(Communicator& comm, const void* sendbuff, const std::vector<Block>& blocks,
                       void* recvbuff, DLDataType dtype, infiniCclRedOp_t op, const char* name) {
  const size_t element_bytes = ElementBytes(dtype);
  size_t total_count = 0;
  for (const Block& b : blocks) total_count += b.count;
  const ReportedCollective reported(comm, name,
                                    comm.world_size() == 1 ? kLocalCopyAlgorithm : kRingAlgorithm,
                                    total_count * element_bytes);
  const ReduceFunction reduce = FindReduceFunction(dtype, op);
  const int world_size = comm.world_size();
  const int rank = comm.rank();
  auto* input = static_cast<const unsigned char*>(sendbuff);
  auto block = [&](int index) -> const Block& {
    return blocks[static_cast<size_t>(((index % world_size) + world_size) % world_size)];
  };
  const size_t own_count = blocks[rank].count;
  if (world_size == 1) {
    CopyIfDistinct(recvbuff, input + blocks[0].offset_bytes, own_count * element_bytes);
    FinishAverage(op, recvbuff, own_count, dtype, world_size);
    return;
  }
  size_t largest_bytes = 0;
  size_t input_extent = 0;
  for (const Block& b : blocks) {
    largest_bytes = std::max(largest_bytes, b.count * element_bytes);
    if (b.count > 0)
      input_extent = std::max(input_extent, b.offset_bytes + b.count * element_bytes);
  }
  if (largest_bytes == 0) return;

  const auto& context = comm.context();
  std::unique_ptr<unsigned char[]> scratch(new unsigned char[3 * largest_bytes]);
  unsigned char* incoming_memory = scratch.get();
  unsigned char* partial_memory = scratch.get() + largest_bytes;
  auto incoming = context->createUnboundBuffer(incoming_memory, largest_bytes);
  auto partial = context->createUnboundBuffer(partial_memory, 2 * largest_bytes);
  auto whole_input = context->createUnboundBuffer(const_cast<unsigned char*>(input), input_extent);
  // Every rank knows every block's size: they must agree (see NextCollectiveTag).
  uint64_t agreed = Communicator::Agreement(
      {infiniCclCollReduceScatter, element_bytes, static_cast<uint64_t>(op)});
  for (const Block& b : blocks) agreed = Communicator::Agreement({agreed, b.count});
  const uint64_t slot = MakeSlot(kReduceScatterSlotPrefix, comm.NextCollectiveTag(agreed));
  const int right = (rank + 1) % world_size;
  const int left = (rank + world_size - 1) % world_size;

  ::gloo::transport::UnboundBuffer* outgoing = whole_input.get();
  size_t outgoing_offset = block(rank - 1).offset_bytes;
  for (int step = 0; step < world_size - 1; ++step) {
    const size_t outgoing_bytes = block(rank - step - 1).count * element_bytes;
    const Block& folding = block(rank - step - 2);
    const size_t incoming_bytes = folding.count * element_bytes;
    if (incoming_bytes > 0) incoming->recv(left, slot, 0, incoming_bytes);
    if (outgoing_bytes > 0) outgoing->send(right, slot, outgoing_offset, outgoing_bytes);
    if (incoming_bytes > 0) {
      ThrowIfNotCompleted(incoming->waitRecv(comm.timeout()), "reduce_scatter receive");
    }
    const bool last_step = step == world_size - 2;
    void* folded = last_step ? recvbuff : partial_memory + (step % 2) * largest_bytes;
    if (folding.count > 0) {
      reduce(folded, input + folding.offset_bytes, incoming_memory, folding.count);
    }
    if (outgoing_bytes > 0) {
      ThrowIfNotCompleted(outgoing->waitSend(comm.timeout()), "reduce_scatter send");
    }
    outgoing = partial.get();
    outgoing_offset = (step % 2) * largest_bytes;
  }
  FinishAverage(op, recvbuff, own_count, dtype, world_size);
}

}  // namespace

void ReduceScatter(Communicator& comm, const void* sendbuff, void* recvbuff, size_t recvcount,
                   DLDataType dtype, infiniCclRedOp_t op) {
  if (recvcount == 0) return;
  const size_t block_bytes = recvcount * ElementBytes(dtype);
  std::vector<Block> blocks;
  for (int r = 0; r < comm.world_size(); ++r) blocks.push_back({r * block_bytes, recvcount});
  RingReduceScatter(comm, sendbuff, blocks, recvbuff, dtype, op, "reduce_scatter");
}

void ReduceScatterV(Communicator& comm, const void* sendbuff, const size_t* sendcounts,
                    const size_t* sdispls, void* recvbuff, DLDataType dtype, infiniCclRedOp_t op) {
  const size_t element_bytes = ElementBytes(dtype);
  std::vector<Block> blocks;
  for (int r = 0; r < comm.world_size(); ++r) {
    blocks.push_back({sdispls[r] * element_bytes, sendcounts[r]});
  }
  RingReduceScatter(comm, sendbuff, blocks, recvbuff, dtype, op, "reduce_scatter_v");
}

}  // namespace infini::gloo_backend
