#include "collective_plan.h"

#include <algorithm>

#include "infini/ccl/bus_bandwidth.h"

namespace infini::bench {

double BusBandwidthFactor(Collective collective, int world_size) {
  return ccl::BusBandwidthFactor(collective, world_size);
}

BufferPlan PlanBuffers(Collective collective, int64_t requested_bytes, size_t element_bytes,
                       int world_size) {
  const int64_t element_size = static_cast<int64_t>(element_bytes);
  const int64_t elements = std::max<int64_t>(1, requested_bytes / element_size);
  BufferPlan plan;
  const bool sharded = collective == Collective::kAllGather ||
                       collective == Collective::kReduceScatter ||
                       collective == Collective::kAllToAll;
  plan.chunk_elements = sharded ? std::max<int64_t>(1, elements / world_size) : elements;
  plan.total_elements = sharded ? plan.chunk_elements * world_size : elements;
  plan.send_elements =
      collective == Collective::kAllGather ? plan.chunk_elements : plan.total_elements;
  plan.recv_elements =
      collective == Collective::kReduceScatter ? plan.chunk_elements : plan.total_elements;
  plan.bytes = plan.total_elements * element_size;
  return plan;
}

}  // namespace infini::bench
