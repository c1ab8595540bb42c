#include "graphs.h"

#include <memory>

#include "device_runtime.h"
#include "errors.h"

namespace infini::ccl::nccl {

infiniCclResult_t StreamBeginCapture(infiniCclStream_t stream) {
  if (stream == nullptr) {
    return Fail(infiniCclInvalidArgument,
                "stream_begin_capture: the default stream cannot be captured; use a stream from "
                "stream_create");
  }
  // Thread-local mode: in a 1-process x N-threads layout, another rank's
  // thread may allocate or synchronize while this one captures.
  return CheckCuda(cudaStreamBeginCapture(ToCuda(stream), cudaStreamCaptureModeThreadLocal),
                   "stream_begin_capture: cudaStreamBeginCapture");
}

infiniCclResult_t StreamEndCapture(infiniCclStream_t stream, infiniCclGraph_t* graph) {
  if (graph == nullptr) {
    return Fail(infiniCclInvalidArgument, "stream_end_capture: graph is NULL");
  }
  *graph = nullptr;
  auto captured = std::make_unique<infiniCclGraph>();
  CCLCHECK(CheckCuda(cudaStreamEndCapture(ToCuda(stream), &captured->graph),
                     "stream_end_capture: cudaStreamEndCapture"));
  if (infiniCclResult_t result =
          CheckCuda(cudaGraphInstantiate(&captured->executable, captured->graph, 0),
                    "stream_end_capture: cudaGraphInstantiate");
      result != infiniCclSuccess) {
    cudaGraphDestroy(captured->graph);
    return result;
  }
  *graph = captured.release();
  return infiniCclSuccess;
}

infiniCclResult_t GraphLaunch(infiniCclGraph_t graph, infiniCclStream_t stream) {
  if (graph == nullptr) return Fail(infiniCclInvalidArgument, "graph_launch: graph is NULL");
  return CheckCuda(cudaGraphLaunch(graph->executable, ToCuda(stream)),
                   "graph_launch: cudaGraphLaunch");
}

infiniCclResult_t GraphDestroy(infiniCclGraph_t graph) {
  if (graph == nullptr) return infiniCclSuccess;
  infiniCclResult_t result =
      CheckCuda(cudaGraphExecDestroy(graph->executable), "graph_destroy: cudaGraphExecDestroy");
  const infiniCclResult_t destroyed =
      CheckCuda(cudaGraphDestroy(graph->graph), "graph_destroy: cudaGraphDestroy");
  delete graph;
  return result != infiniCclSuccess ? result : destroyed;
}

}  // namespace infini::ccl::nccl
