// all_reduce, reduce and reduce_scatter: gloo's ring all-reduce and reduce
// with our element-wise kernels, and a ring reduce-scatter of our own (gloo
// has none on unbound buffers).
#include <gloo/allreduce.h>
#include <gloo/reduce.h>

#include <cstring>
#include <memory>

#include "collectives.h"
#include "element_type.h"
#include "errors.h"
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
  if (comm.world_size() == 1) {
    CopyIfDistinct(recvbuff, sendbuff, count * element_bytes);
  } else {
    WithOpaqueElement(element_bytes, [&]<class E>() {
      ::gloo::AllreduceOptions options(comm.context());
      // No input means in place: gloo reduces the output buffer.
      if (sendbuff != recvbuff)
        options.setInput(const_cast<E*>(static_cast<const E*>(sendbuff)), count);
      options.setOutput(static_cast<E*>(recvbuff), count);
      options.setReduceFunction(reduce);
      options.setTag(comm.NextCollectiveTag());
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
      options.setTag(comm.NextCollectiveTag());
      options.setTimeout(comm.timeout());
      ::gloo::reduce(options);
    });
  }
  if (is_root) FinishAverage(op, recvbuff, count, dtype, comm.world_size());
}

void ReduceScatter(Communicator& comm, const void* sendbuff, void* recvbuff, size_t recvcount,
                   DLDataType dtype, infiniCclRedOp_t op) {
  if (recvcount == 0) return;
  const size_t element_bytes = ElementBytes(dtype);
  const ReduceFunction reduce = FindReduceFunction(dtype, op);
  const int world_size = comm.world_size();
  const int rank = comm.rank();
  const size_t chunk_bytes = recvcount * element_bytes;
  auto* input = static_cast<const unsigned char*>(sendbuff);
  auto chunk_offset = [&](int index) {
    return static_cast<size_t>(((index % world_size) + world_size) % world_size) * chunk_bytes;
  };

  if (world_size == 1) {
    CopyIfDistinct(recvbuff, sendbuff, chunk_bytes);
    return;
  }

  // Ring: in step s, rank r passes the partial result of chunk r-s-1 to its
  // right neighbour and folds its own input into chunk r-s-2 coming from the
  // left; after world_size-1 steps chunk r is complete on rank r. Partial
  // results alternate between two scratch chunks so the one being sent is
  // never overwritten.
  const auto& context = comm.context();
  std::unique_ptr<unsigned char[]> scratch(new unsigned char[3 * chunk_bytes]);
  unsigned char* incoming_memory = scratch.get();
  unsigned char* partial_memory = scratch.get() + chunk_bytes;
  auto incoming = context->createUnboundBuffer(incoming_memory, chunk_bytes);
  auto partial = context->createUnboundBuffer(partial_memory, 2 * chunk_bytes);
  auto whole_input =
      context->createUnboundBuffer(const_cast<unsigned char*>(input), world_size * chunk_bytes);
  const uint64_t slot = MakeSlot(kReduceScatterSlotPrefix, comm.NextCollectiveTag());
  const int right = (rank + 1) % world_size;
  const int left = (rank + world_size - 1) % world_size;

  ::gloo::transport::UnboundBuffer* outgoing = whole_input.get();
  size_t outgoing_offset = chunk_offset(rank - 1);
  for (int step = 0; step < world_size - 1; ++step) {
    incoming->recv(left, slot, 0, chunk_bytes);
    outgoing->send(right, slot, outgoing_offset, chunk_bytes);
    ThrowIfNotCompleted(incoming->waitRecv(comm.timeout()), "reduce_scatter receive");
    const bool last_step = step == world_size - 2;
    void* folded = last_step ? recvbuff : partial_memory + (step % 2) * chunk_bytes;
    reduce(folded, input + chunk_offset(rank - step - 2), incoming_memory, recvcount);
    ThrowIfNotCompleted(outgoing->waitSend(comm.timeout()), "reduce_scatter send");
    outgoing = partial.get();
    outgoing_offset = (step % 2) * chunk_bytes;
  }
  FinishAverage(op, recvbuff, recvcount, dtype, world_size);
}

}  // namespace infini::gloo_backend
