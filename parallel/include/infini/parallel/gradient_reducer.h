// Data-parallel gradient averaging that overlaps backward (model: torch DDP's
// Reducer with gradient_as_bucket_view=True).
//
// The reducer owns the gradients' storage: one flat buffer per dtype, laid
// out in the order backward produces the gradients, cut into buckets of about
// `bucket_bytes`. The model writes each gradient into the view Gradient(i)
// and calls MarkReady(i) once it is final for the step; when the last
// gradient of a bucket is ready, that bucket's all_reduce starts on the
// group's communication stream, after the compute stream's work so far, and
// overlaps the rest of backward. The optimizer waits only for what it needs
// (WaitFor, WaitAll: stream waits, no host block on device backends).
//
//   GradientReducer reducer(world, {{"wte", kFloat32, 38597376}, ...});
//   model.SetGradientStorage(i, reducer.Gradient(i));
//   ... backward: after gradient i is written on `compute`:
//   reducer.MarkReady(i, compute);
//   reducer.WaitAll(compute);  // then the optimizer step on `compute`
//
// Gradient accumulation: SetSynchronize(false) for every micro-step but the
// last; MarkReady then only counts, nothing is sent, and WaitAll ends the
// micro-step like a step (each gradient is marked once between WaitAlls).
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::parallel {

class ProcessGroup;

struct GradientSpec {
  std::string name;  // for errors and logs
  DLDataType dtype;
  size_t count = 0;  // elements
};

struct GradientReducerOptions {
  // torch DDP's default bucket_cap_mb = 25. A gradient larger than this is a
  // bucket of its own.
  size_t bucket_bytes = size_t{25} << 20;
  // Divide by the group's size (folded into the reduction as ReduceOp::kAvg
  // when the backend supports it; otherwise see needs_scaling()).
  bool average = true;
  // Register each bucket with the group's communicator (and with each one
  // that replaces it after a shrink or an admission) where the backend
  // offers registration (ProcessGroup::RegisterBuffer): NCCL may then
  // reduce it without staging copies. Other backends: no effect.
  bool register_buckets = true;
};

class GradientReducer {
 public:
  // `gradients` in the order backward produces them. Allocates the storage
  // on the group's backend and device (zero-filled). Collective over the
  // group only in that every member must build the same list (checked in
  // debug mode by the group's signatures).
  GradientReducer(ProcessGroup& group, std::vector<GradientSpec> gradients,
                  GradientReducerOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  size_t size() const;  // number of gradients
  // The view the model writes gradient `index` into (device memory of the
  // backend). Valid as long as the reducer.
  const DLTensor& Gradient(size_t index) const;

  // Gradient `index` is final for this step; its writes were enqueued on
  // `compute_stream`. Each gradient once per step. Starts its bucket's
  // all_reduce when the bucket is complete and synchronization is on.
  void MarkReady(size_t index, const ccl::Stream& compute_stream);
  // Whether this step's gradients are communicated (false: accumulate).
  void SetSynchronize(bool synchronize);

  // Future work on `compute_stream` waits for every bucket (or for the bucket
  // holding gradient `index`). Throws the error of a failed bucket. After
  // WaitAll, the next step begins: every gradient may be marked again.
  void WaitAll(const ccl::Stream& compute_stream);
  void WaitFor(size_t index, const ccl::Stream& compute_stream);

  // True when averaging was asked for but the backend cannot reduce with
  // kAvg for these dtypes: the reduction is a sum, and the caller divides by
  // the group's size (in its optimizer's scale, say).
  bool needs_scaling() const;
  size_t num_buckets() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace infini::parallel
