#include "capabilities.h"

#include "types.h"

namespace infini::ccl::nccl {

int Supports(infiniCclCollective_t collective, DLDataType datatype, infiniCclRedOp_t op) {
  switch (collective) {
    case infiniCclCollAllReduce:
    case infiniCclCollReduce:
    case infiniCclCollReduceScatter:
    case infiniCclCollReduceScatterV:
      return Reducible(datatype, op) ? 1 : 0;
    case infiniCclCollBroadcast:
    case infiniCclCollAllGather:
    case infiniCclCollSend:
    case infiniCclCollRecv:
    case infiniCclCollAllToAll:
    case infiniCclCollAllToAllV:
    case infiniCclCollAllGatherV:
    case infiniCclCollGather:
    case infiniCclCollScatter:
      return Movable(datatype) ? 1 : 0;
    case infiniCclCollBarrier:
      return 1;
    case infiniCclNumCollectives:
      break;
  }
  return 0;  // a collective this plugin's header does not know
}

}  // namespace infini::ccl::nccl
