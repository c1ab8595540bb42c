#include "infini/ccl/capabilities.h"

#include <stdexcept>
#include <string>

#include "infini/ccl/dtype.h"
#include "infini/common/one_line.h"

namespace infini::ccl {
namespace {

const void* EntryOf(const infiniCclPlugin_t& plugin, Collective collective) {
  switch (collective) {
    case Collective::kAllReduce:
      return reinterpret_cast<const void*>(plugin.all_reduce);
    case Collective::kBroadcast:
      return reinterpret_cast<const void*>(plugin.broadcast);
    case Collective::kReduce:
      return reinterpret_cast<const void*>(plugin.reduce);
    case Collective::kAllGather:
      return reinterpret_cast<const void*>(plugin.all_gather);
    case Collective::kReduceScatter:
      return reinterpret_cast<const void*>(plugin.reduce_scatter);
    case Collective::kSend:
      return reinterpret_cast<const void*>(plugin.send);
    case Collective::kRecv:
      return reinterpret_cast<const void*>(plugin.recv);
    case Collective::kAllToAll:
      return reinterpret_cast<const void*>(plugin.all_to_all);
    case Collective::kBarrier:
      return reinterpret_cast<const void*>(plugin.barrier);
    case Collective::kAllToAllV:
      return reinterpret_cast<const void*>(plugin.all_to_all_v);
    case Collective::kAllGatherV:
      return reinterpret_cast<const void*>(plugin.all_gather_v);
    case Collective::kReduceScatterV:
      return reinterpret_cast<const void*>(plugin.reduce_scatter_v);
    case Collective::kGather:
      return reinterpret_cast<const void*>(plugin.gather);
    case Collective::kScatter:
      return reinterpret_cast<const void*>(plugin.scatter);
  }
  return nullptr;
}

}  // namespace

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "unknown";
}

ReduceOp ParseReduceOp(std::string_view name) {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
    if (ReduceOpName(op) == name) return op;
  }
  throw std::invalid_argument("unknown reduction '" + OneLine(name) +
                              "': expected sum, prod, max, min or avg");
}

Capabilities::Capabilities(const infiniCclPlugin_t& plugin)
    : features_(plugin.features),
      split_(plugin.comm_split != nullptr),
      abort_(plugin.comm_abort != nullptr),
      group_(plugin.group_start != nullptr && plugin.group_end != nullptr),
      capture_(plugin.stream_begin_capture != nullptr),
      init_rank_(plugin.comm_init_rank != nullptr),
      init_ranks_(plugin.comm_init_ranks != nullptr),
      shrink_(plugin.comm_shrink != nullptr),
      revoke_(plugin.comm_revoke != nullptr),
      register_(plugin.comm_register != nullptr && plugin.comm_deregister != nullptr),
      register_windows_(plugin.comm_window_register != nullptr &&
                        plugin.comm_window_deregister != nullptr),
      link_bandwidth_(plugin.get_link_bandwidth != nullptr) {
  for (int c = 0; c < kNumCollectives; ++c) {
    const auto collective = static_cast<Collective>(c);
    implemented_[c] = EntryOf(plugin, collective) != nullptr;
    if (!implemented_[c]) continue;
    for (int t = 0; t < kNumKnownDataTypes; ++t) {
      const DLDataType dtype = KnownDataType(t);
      if (collective == Collective::kBarrier) {
        supported_[c][t][0] = true;
        continue;
      }
      const int ops = IsReduction(collective) ? kNumReduceOps : 1;
      for (int op = 0; op < ops; ++op) {
        supported_[c][t][op] = plugin.supports(static_cast<infiniCclCollective_t>(c), dtype,
                                               static_cast<infiniCclRedOp_t>(op)) != 0;
      }
    }
  }
}

bool Capabilities::Supports(Collective collective, DLDataType dtype, ReduceOp op) const {
  const int c = static_cast<int>(collective);
  if (!implemented_[c]) return false;
  if (collective == Collective::kBarrier) return true;
  const int t = KnownDataTypeIndex(dtype);
  if (t < 0) return false;
  return supported_[c][t][IsReduction(collective) ? static_cast<int>(op) : 0];
}

}  // namespace infini::ccl
