// Optional stream capture: CUDA graphs, which NCCL collectives may join.
#pragma once

#include <cuda_runtime_api.h>

#include "infini/ccl/plugin_abi.h"

// The ABI's opaque graph type: a captured graph and its executable form.
struct infiniCclGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t executable = nullptr;
};

namespace infini::ccl::nccl {

infiniCclResult_t StreamBeginCapture(infiniCclStream_t stream);
infiniCclResult_t StreamEndCapture(infiniCclStream_t stream, infiniCclGraph_t* graph);
infiniCclResult_t GraphLaunch(infiniCclGraph_t graph, infiniCclStream_t stream);
infiniCclResult_t GraphDestroy(infiniCclGraph_t graph);

}  // namespace infini::ccl::nccl
