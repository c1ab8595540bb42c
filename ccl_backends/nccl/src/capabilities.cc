#include "capabilities.h"

#include "types.h"

namespace infini::ccl::nccl {

int Supports(infiniCclCollective_t collective, DLDataType datatype, infiniCclRedOp_t op) {
  const int index = static_cast<int>(collective);
  if (index < 0 || index >= infiniCclNumCollectives) return 0;  // unknown to this plugin's header
  if (collective == infiniCclCollBarrier) return 1;
  if (infiniCclCollectiveReduces(collective)) return Reducible(datatype, op) ? 1 : 0;
  return Movable(datatype) ? 1 : 0;
}

}  // namespace infini::ccl::nccl
