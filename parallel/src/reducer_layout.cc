#include "reducer_layout.h"

#include <algorithm>
#include <optional>

#include "infini/ccl/dtype.h"

namespace infini::parallel::internal {
namespace {

// The bucket of one dtype that is still being filled.
struct OpenBucket {
  std::optional<size_t> bucket;
  size_t bytes = 0;
};

}  // namespace

ReducerLayout PlanReducerLayout(const std::vector<GradientSpec>& gradients, size_t bucket_bytes) {
  ReducerLayout layout;
  std::vector<OpenBucket> open;  // per storage
  for (size_t index = 0; index < gradients.size(); ++index) {
    const GradientSpec& spec = gradients[index];
    auto storage_it = std::find_if(
        layout.storages.begin(), layout.storages.end(),
        [&](const StoragePlacement& s) { return ccl::operator==(s.dtype, spec.dtype); });
    if (storage_it == layout.storages.end()) {
      layout.storages.push_back({spec.dtype, 0});
      open.emplace_back();
      storage_it = layout.storages.end() - 1;
    }
    const size_t storage = static_cast<size_t>(storage_it - layout.storages.begin());
    const size_t bytes = spec.count * ccl::ElementBytes(spec.dtype);
    OpenBucket& current = open[storage];
    if (current.bucket && current.bytes > 0 && current.bytes + bytes > bucket_bytes) {
      current = {};
    }
    if (!current.bucket) {
      layout.buckets.push_back({storage, storage_it->count, 0, {}});
      current.bucket = layout.buckets.size() - 1;
    }
    BucketPlacement& bucket = layout.buckets[*current.bucket];
    layout.gradients.push_back({storage, storage_it->count, *current.bucket});
    bucket.count += spec.count;
    bucket.gradients.push_back(index);
    storage_it->count += spec.count;
    current.bytes += bytes;
    if (current.bytes >= bucket_bytes) current = {};
  }
  return layout;
}

}  // namespace infini::parallel::internal
