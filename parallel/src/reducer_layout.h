// Internal: where each gradient of a GradientReducer lives and which bucket
// it belongs to. Pure arithmetic, so it is tested without ranks.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <vector>

#include "infini/parallel/gradient_reducer.h"

namespace infini::parallel::internal {

struct GradientPlacement {
  size_t storage = 0;  // index into ReducerLayout::storages
  size_t offset = 0;   // elements from the start of that storage
  size_t bucket = 0;   // index into ReducerLayout::buckets
};

struct BucketPlacement {
  size_t storage = 0;
  size_t offset = 0;              // elements
  size_t count = 0;               // elements
  std::vector<size_t> gradients;  // indices, in the order given
};

struct StoragePlacement {
  DLDataType dtype{};
  size_t count = 0;  // elements
};

struct ReducerLayout {
  std::vector<StoragePlacement> storages;  // one per dtype, in order of first use
  std::vector<GradientPlacement> gradients;
  // Ordered by their first gradient: the order in which every rank issues
  // their all_reduces.
  std::vector<BucketPlacement> buckets;
};

// Lays the gradients of each dtype out contiguously, in the order given, and
// cuts each dtype's run into buckets of at most `bucket_bytes`; a gradient
// larger than that is a bucket of its own.
ReducerLayout PlanReducerLayout(const std::vector<GradientSpec>& gradients, size_t bucket_bytes);

}  // namespace infini::parallel::internal
