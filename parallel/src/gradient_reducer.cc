// GradientReducer: flat per-dtype storage, buckets in backward order, one
// all_reduce per bucket issued in bucket order (so every rank issues the same
// sequence even when its gradients become ready in another order).
#include "infini/parallel/gradient_reducer.h"

#include <glog/logging.h>

#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "infini/ccl/dtype.h"
#include "infini/ccl/trace.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/process_group.h"
#include "reducer_layout.h"

namespace infini::parallel {

struct GradientReducer::State {
  ProcessGroup* group = nullptr;
  std::vector<GradientSpec> specs;
  internal::ReducerLayout layout;
  std::vector<ccl::DeviceBuffer> storages;    // one per layout.storages
  std::vector<ccl::FlatTensor> views;         // one per gradient
  std::vector<ccl::FlatTensor> bucket_views;  // one per bucket
  // After `storages`, so that each bucket is deregistered before its memory
  // is freed. One per non-empty bucket when registering.
  std::vector<GroupBufferRegistration> registrations;
  ccl::ReduceOp op = ccl::ReduceOp::kSum;
  bool needs_scaling = false;

  // Per step; reset by WaitAll.
  std::mutex mutex;
  bool synchronize = true;
  std::vector<bool> marked;                  // per gradient
  std::vector<size_t> pending;               // per bucket: gradients not yet marked
  std::vector<std::shared_ptr<Work>> works;  // per bucket, once issued
  size_t next_bucket_to_issue = 0;

  std::string Name(size_t index) const {
    return "gradient '" + specs[index].name + "' (index " + std::to_string(index) + ")";
  }
  void RequireIndex(size_t index, const char* call) const {
    if (index >= specs.size()) {
      throw ParallelUsageError(std::string("GradientReducer::") + call + ": gradient index " +
                               std::to_string(index) + " is out of range: expected 0.." +
                               std::to_string(specs.size()) + " (exclusive)");
    }
  }
  void ResetStep() {
    marked.assign(specs.size(), false);
    pending.clear();
    for (const auto& bucket : layout.buckets) pending.push_back(bucket.gradients.size());
    works.assign(layout.buckets.size(), nullptr);
    next_bucket_to_issue = 0;
  }
  // Issues every complete bucket whose predecessors are issued.
  void IssueReadyBuckets(const ccl::Stream& compute_stream) {
    while (next_bucket_to_issue < layout.buckets.size() && pending[next_bucket_to_issue] == 0) {
      const size_t bucket = next_bucket_to_issue++;
      if (layout.buckets[bucket].count == 0) continue;  // only empty gradients
      const DLTensor& view = bucket_views[bucket];
      const int64_t trace_begin = ccl::trace::Enabled() ? ccl::trace::NowNs() : 0;
      works[bucket] = group->AllReduceAsync(view, view, op, compute_stream);
      if (trace_begin != 0)
        TraceBucket(ccl::trace::Category::kBucket, "bucket", bucket, trace_begin);
    }
  }
  // A bucket's span in the trace (its index as the number).
  void TraceBucket(ccl::trace::Category category, const char* name, size_t bucket,
                   int64_t begin_ns) const {
    const auto& place = layout.buckets[bucket];
    const uint64_t bytes = place.count * ccl::ElementBytes(layout.storages[place.storage].dtype);
    ccl::trace::RecordSpan(group->trace_lane(), category, name, group->name(),
                           static_cast<int64_t>(bucket), bytes, begin_ns, ccl::trace::NowNs());
  }
  // The first gradient of `bucket` (in order) not yet marked this step.
  size_t FirstUnmarked(size_t bucket) const {
    for (size_t index : layout.buckets[bucket].gradients) {
      if (!marked[index]) return index;
    }
    return layout.buckets[bucket].gradients.front();
  }
  // Makes `compute_stream` wait for `bucket`, rethrowing its failure. A
  // bucket not issued is the caller's mistake only while synchronizing.
  void WaitForBucket(size_t bucket, const ccl::Stream& compute_stream, const char* call) const {
    if (const auto& work = works[bucket]) {
      const int64_t trace_begin = ccl::trace::Enabled() ? ccl::trace::NowNs() : 0;
      work->WaitOnStream(compute_stream);
      if (trace_begin != 0)
        TraceBucket(ccl::trace::Category::kWait, "bucket_wait", bucket, trace_begin);
      if (auto error = work->error()) std::rethrow_exception(error);
      return;
    }
    if (synchronize && bucket >= next_bucket_to_issue) {
      throw ParallelUsageError(std::string("GradientReducer::") + call + ": " +
                               Name(FirstUnmarked(bucket)) +
                               " was not marked ready this step: every gradient of a bucket must "
                               "be marked before its result is waited for");
    }
  }
};

GradientReducer::GradientReducer(ProcessGroup& group, std::vector<GradientSpec> gradients,
                                 GradientReducerOptions options)
    : state_(std::make_unique<State>()) {
  if (!group.is_member()) {
    throw ParallelUsageError("GradientReducer: this rank is not a member of process group '" +
                             group.name() + "'");
  }
  if (options.bucket_bytes == 0) {
    throw ParallelUsageError("GradientReducer: bucket_bytes=0: expected a positive size");
  }
  const std::shared_ptr<const ccl::Backend>& backend = group.backend();
  const ccl::Capabilities& capabilities = backend->capabilities();
  State& state = *state_;
  state.group = &group;
  state.specs = std::move(gradients);
  bool every_dtype_averages = true;
  for (size_t index = 0; index < state.specs.size(); ++index) {
    const DLDataType dtype = state.specs[index].dtype;
    if (!capabilities.Supports(ccl::Collective::kAllReduce, dtype, ccl::ReduceOp::kSum)) {
      throw ParallelUsageError("GradientReducer: " + state.Name(index) + " has dtype " +
                               ccl::DataTypeName(dtype) + ", which backend '" +
                               backend->info().name + "' cannot all_reduce");
    }
    every_dtype_averages =
        every_dtype_averages &&
        capabilities.Supports(ccl::Collective::kAllReduce, dtype, ccl::ReduceOp::kAvg);
  }
  // One operator for every bucket, so that a caller that must scale scales
  // every gradient alike.
  if (options.average && every_dtype_averages) {
    state.op = ccl::ReduceOp::kAvg;
  } else {
    state.op = ccl::ReduceOp::kSum;
    state.needs_scaling = options.average && group.size() > 1;
  }

  state.layout = internal::PlanReducerLayout(state.specs, options.bucket_bytes);
  for (const auto& storage : state.layout.storages) {
    const size_t bytes = storage.count * ccl::ElementBytes(storage.dtype);
    ccl::DeviceBuffer buffer(backend, bytes);
    if (bytes > 0) backend->MemsetAsync(buffer.data(), 0, bytes);
    state.storages.push_back(std::move(buffer));
  }
  ccl::Stream::Default(backend).Synchronize();
  for (size_t index = 0; index < state.specs.size(); ++index) {
    const auto& place = state.layout.gradients[index];
    state.views.push_back(state.storages[place.storage].AsTensor(
        state.specs[index].dtype, static_cast<int64_t>(state.specs[index].count),
        static_cast<int64_t>(place.offset)));
  }
  for (const auto& bucket : state.layout.buckets) {
    state.bucket_views.push_back(state.storages[bucket.storage].AsTensor(
        state.layout.storages[bucket.storage].dtype, static_cast<int64_t>(bucket.count),
        static_cast<int64_t>(bucket.offset)));
  }
  if (options.register_buckets) {
    for (size_t bucket = 0; bucket < state.layout.buckets.size(); ++bucket) {
      const auto& place = state.layout.buckets[bucket];
      if (place.count == 0) continue;
      const size_t bytes =
          place.count * ccl::ElementBytes(state.layout.storages[place.storage].dtype);
      state.registrations.push_back(
          group.RegisterBuffer(ccl::DataPointer(state.bucket_views[bucket]), bytes));
    }
  }
  state.ResetStep();
  VLOG(1) << "GradientReducer on group '" << group.name() << "': " << state.specs.size()
          << " gradients in " << state.layout.buckets.size() << " buckets, op "
          << ccl::ReduceOpName(state.op);
}

GradientReducer::~GradientReducer() {
  // The storage must outlive every all_reduce that still reads or writes it.
  for (const auto& work : state_->works) {
    if (!work) continue;
    try {
      work->Wait();
    } catch (const std::exception& error) {
      LOG(WARNING) << "GradientReducer: an unwaited bucket failed: " << error.what();
    }
  }
}

size_t GradientReducer::size() const { return state_->specs.size(); }

size_t GradientReducer::num_buckets() const { return state_->layout.buckets.size(); }

bool GradientReducer::needs_scaling() const { return state_->needs_scaling; }

const DLTensor& GradientReducer::Gradient(size_t index) const {
  state_->RequireIndex(index, "Gradient");
  return state_->views[index];
}

void GradientReducer::MarkReady(size_t index, const ccl::Stream& compute_stream) {
  State& state = *state_;
  state.RequireIndex(index, "MarkReady");
  std::lock_guard lock(state.mutex);
  if (state.marked[index]) {
    throw ParallelUsageError("GradientReducer::MarkReady: " + state.Name(index) +
                             " was marked ready twice in one step: call WaitAll at the end of "
                             "every step, accumulation micro-steps included");
  }
  state.marked[index] = true;
  const size_t bucket = state.layout.gradients[index].bucket;
  --state.pending[bucket];
  if (state.synchronize) state.IssueReadyBuckets(compute_stream);
}

void GradientReducer::SetSynchronize(bool synchronize) {
  std::lock_guard lock(state_->mutex);
  state_->synchronize = synchronize;
}

void GradientReducer::WaitFor(size_t index, const ccl::Stream& compute_stream) {
  State& state = *state_;
  state.RequireIndex(index, "WaitFor");
  std::lock_guard lock(state.mutex);
  // Buckets completed while synchronization was off go out now.
  if (state.synchronize) state.IssueReadyBuckets(compute_stream);
  state.WaitForBucket(state.layout.gradients[index].bucket, compute_stream, "WaitFor");
}

void GradientReducer::WaitAll(const ccl::Stream& compute_stream) {
  State& state = *state_;
  std::lock_guard lock(state.mutex);
  if (state.synchronize) state.IssueReadyBuckets(compute_stream);
  // Every issued bucket is waited for, also in a step whose synchronization
  // was switched off midway: the next step writes into the same storage.
  std::exception_ptr first_error;
  for (size_t bucket = 0; bucket < state.layout.buckets.size(); ++bucket) {
    try {
      state.WaitForBucket(bucket, compute_stream, "WaitAll");
    } catch (const ParallelUsageError&) {
      throw;  // the step stays open: the caller may still mark the rest
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  state.ResetStep();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace infini::parallel
