// One benchmark case (collective × message size) on one thread rank: its
// buffers, one launch of the collective, and the --check verification.
#pragma once

#include <cstdint>
#include <string>

#include "bench_options.h"
#include "bench_world.h"
#include "collective_plan.h"

namespace infini::bench {

struct CaseSpec {
  Collective collective = Collective::kAllReduce;
  int64_t requested_bytes = 0;
  DLDataType dtype = ccl::dtype::kFloat32;
  ccl::ReduceOp op = ccl::ReduceOp::kSum;
  bool in_place = false;
  int root = 0;
  int registration = 0;  // -R: 0 none, 1 comm_register, 2 comm_window_register (symmetric)
};

// "all_reduce/float32/sum/out_of_place/bytes:1024" (op omitted for the
// collectives that do not reduce): the Google Benchmark name.
std::string CaseName(const CaseSpec& spec, int world_size);

class CollectiveCase {
 public:
  // Allocates the buffers on the rank's device and fills them with the
  // --check input pattern.
  CollectiveCase(const CaseSpec& spec, const RankResources& rank);

  const BufferPlan& plan() const { return plan_; }
  // Bytes of this rank's send and receive buffers together (-M).
  int64_t buffer_bytes() const {
    return static_cast<int64_t>(send_.bytes() + (spec_.in_place ? 0 : recv_.bytes()));
  }
  // Enqueues the collective once on the rank's stream.
  void Launch() const;
  // Puts the input pattern back (in-place runs overwrite it).
  void FillInputs() const;
  // Copies the output back and compares it with the host reference; returns
  // the number of wrong elements and prints the first to stderr.
  int64_t CountWrongElements() const;

 private:
  // Element offsets of the send and receive views in their buffers.
  int64_t SendOffset() const;
  int64_t RecvOffset() const;
  ccl::FlatTensor SendTensor() const;
  ccl::FlatTensor RecvTensor() const;
  void SendRecvRing(const ccl::FlatTensor& send, const ccl::FlatTensor& recv) const;

  CaseSpec spec_;
  const RankResources& rank_;
  int world_size_;   // of the case's communicator (the group's under --split)
  int global_rank_;  // this rank there
  BufferPlan plan_;
  ccl::DeviceBuffer send_;
  ccl::DeviceBuffer recv_;  // unused in place
  // -R 1 or 2; declared after the buffers, so deregistered before they are
  // freed.
  ccl::BufferRegistration send_registration_;
  ccl::BufferRegistration recv_registration_;
};

}  // namespace infini::bench
