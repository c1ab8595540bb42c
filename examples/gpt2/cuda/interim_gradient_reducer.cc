// INTERIM, to be deleted when parallel/ ships GradientReducer (branch
// `reducer`): a minimal implementation of parallel/gradient_reducer.h so that
// gpt2 links before the real one lands. CMake compiles it only while no
// source under parallel/src defines GradientReducer. Same contract, fewer
// guarantees: buckets cut greedily in list order, every bucket a sum
// (needs_scaling() is true when averaging), no debug signature checks.
#include <cuda_runtime.h>

#include <stdexcept>

#include "infini/parallel/gradient_reducer.h"
#include "infini/parallel/process_group.h"

namespace infini::parallel {

struct GradientReducer::State {
  ProcessGroup* group = nullptr;
  GradientReducerOptions options;
  std::vector<GradientSpec> specs;
  void* storage = nullptr;
  std::vector<ccl::FlatTensor> views;
  struct Bucket {
    size_t first = 0, last = 0;  // gradients [first, last)
    size_t ready = 0;
    std::shared_ptr<Work> work;
  };
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;
  bool synchronize = true;
  int device = 0;
};

GradientReducer::GradientReducer(ProcessGroup& group, std::vector<GradientSpec> gradients,
                                 GradientReducerOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.group = &group;
  s.options = options;
  s.specs = std::move(gradients);
  if (cudaGetDevice(&s.device) != cudaSuccess) throw std::runtime_error("no CUDA device");
  size_t total = 0;
  std::vector<size_t> offsets;
  for (const GradientSpec& spec : s.specs) {
    offsets.push_back(total);
    total += spec.count * ccl::ElementBytes(spec.dtype);
  }
  if (cudaMalloc(&s.storage, total > 0 ? total : 1) != cudaSuccess ||
      cudaMemset(s.storage, 0, total) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess) {  // the legacy stream orders nothing else
    throw std::runtime_error("cannot allocate " + std::to_string(total >> 20) +
                             " MiB of gradients on the GPU");
  }
  size_t bucket_bytes = 0;
  for (size_t i = 0; i < s.specs.size(); ++i) {
    s.views.emplace_back(static_cast<char*>(s.storage) + offsets[i], s.specs[i].dtype,
                         static_cast<int64_t>(s.specs[i].count), DLDevice{kDLCUDA, s.device});
    const size_t bytes = s.specs[i].count * ccl::ElementBytes(s.specs[i].dtype);
    const bool same_dtype = i > 0 && s.specs[i].dtype.code == s.specs[i - 1].dtype.code &&
                            s.specs[i].dtype.bits == s.specs[i - 1].dtype.bits;
    if (s.buckets.empty() || !same_dtype || bucket_bytes + bytes > options.bucket_bytes) {
      s.buckets.push_back({i, i, 0, nullptr});
      bucket_bytes = 0;
    }
    s.buckets.back().last = i + 1;
    bucket_bytes += bytes;
    s.bucket_of.push_back(s.buckets.size() - 1);
  }
}

GradientReducer::~GradientReducer() {
  if (state_ && state_->storage != nullptr) {
    for (State::Bucket& bucket : state_->buckets) {
      if (bucket.work) bucket.work->Wait();
    }
    cudaDeviceSynchronize();
    cudaFree(state_->storage);
  }
}

size_t GradientReducer::size() const { return state_->specs.size(); }
const DLTensor& GradientReducer::Gradient(size_t index) const {
  return state_->views.at(index).dl();
}

void GradientReducer::MarkReady(size_t index, const ccl::Stream& compute_stream) {
  State& s = *state_;
  State::Bucket& bucket = s.buckets.at(s.bucket_of.at(index));
  if (++bucket.ready < bucket.last - bucket.first) return;
  bucket.ready = 0;  // complete for this micro-step
  if (!s.synchronize) return;
  const GradientSpec& first = s.specs[bucket.first];
  size_t count = 0;
  for (size_t i = bucket.first; i < bucket.last; ++i) count += s.specs[i].count;
  const ccl::FlatTensor tensor(ccl::DataPointer(s.views[bucket.first].dl()), first.dtype,
                               static_cast<int64_t>(count), DLDevice{kDLCUDA, s.device});
  bucket.work = s.group->AllReduceAsync(tensor, tensor, ccl::ReduceOp::kSum, compute_stream);
}

void GradientReducer::SetSynchronize(bool synchronize) { state_->synchronize = synchronize; }

void GradientReducer::WaitAll(const ccl::Stream& compute_stream) {
  for (State::Bucket& bucket : state_->buckets) {
    if (bucket.work) bucket.work->WaitOnStream(compute_stream);
    bucket.work.reset();
  }
}

void GradientReducer::WaitFor(size_t index, const ccl::Stream& compute_stream) {
  State::Bucket& bucket = state_->buckets.at(state_->bucket_of.at(index));
  if (bucket.work) bucket.work->WaitOnStream(compute_stream);
}

bool GradientReducer::needs_scaling() const { return state_->options.average; }
size_t GradientReducer::num_buckets() const { return state_->buckets.size(); }

}  // namespace infini::parallel
