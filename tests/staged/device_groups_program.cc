// A parallel/ program under a backend per device type: one world group, an
// all_reduce (sum) of host tensors and one of tensors on the accelerator's
// device (memory from Context::backend()), each routed by the group to the
// backend of its tensor's type, and the values checked. --tensors=host,
// device or both (default); --tensors=unserved sends a tensor of a DLPack
// type no entry names (OpenCL), which must be one line. Prints
// "device_groups: TYPE tensors summed on BACKEND" per call; exit 0 when
// every value is right, 1 otherwise.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/ccl/device_backends.h"
#include "infini/parallel/context.h"
#include "infini/parallel/process_group.h"

namespace {

namespace ccl = infini::ccl;
namespace parallel = infini::parallel;

constexpr int64_t kCount = 1031;

// Every rank gives rank + 1 + i % 5: the sum is world (world + 1) / 2 + world (i % 5).
bool SumIsRight(const std::vector<float>& values, int world) {
  for (int64_t i = 0; i < kCount; ++i) {
    const float expected = static_cast<float>(world * (world + 1) / 2 + world * (i % 5));
    if (values[static_cast<size_t>(i)] != expected) return false;
  }
  return true;
}

std::vector<float> Inputs(int rank) {
  std::vector<float> values(kCount);
  for (int64_t i = 0; i < kCount; ++i) values[static_cast<size_t>(i)] = rank + 1.0f + i % 5;
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tensors = "both";
  if (argc > 1 && std::strncmp(argv[1], "--tensors=", 10) == 0) tensors = argv[1] + 10;
  try {
    auto context = parallel::Context::Create();
    auto world = context->NewWorldGroup();
    const int rank = context->rank().global_rank(), size = context->rank().world_size();
    bool right = true;
    if (tensors == "host" || tensors == "both") {
      std::vector<float> values = Inputs(rank);
      const ccl::FlatTensor tensor(values.data(), ccl::dtype::kFloat32, kCount, {kDLCPU, 0});
      world->AllReduce(tensor, tensor, ccl::ReduceOp::kSum);
      right = SumIsRight(values, size) && right;
      std::printf("device_groups: cpu tensors summed on %s\n",
                  context->BackendFor({kDLCPU, 0})->info().name.c_str());
    }
    if (tensors == "device" || tensors == "both") {
      const auto& backend = context->backend();
      const std::vector<float> inputs = Inputs(rank);
      ccl::DeviceBuffer buffer(backend, kCount * sizeof(float));
      buffer.CopyFromHost(inputs.data(), inputs.size() * sizeof(float));
      const ccl::FlatTensor tensor = buffer.AsTensor(ccl::dtype::kFloat32, kCount);
      world->AllReduce(tensor, tensor, ccl::ReduceOp::kSum);
      std::vector<float> values(kCount);
      buffer.CopyToHost(values.data(), values.size() * sizeof(float));
      right = SumIsRight(values, size) && right;
      std::printf("device_groups: %s tensors summed on %s\n",
                  ccl::DeviceTypeName(backend->info().device_type).c_str(),
                  backend->info().name.c_str());
    }
    if (tensors == "unserved") {
      float value = 1;
      const ccl::FlatTensor tensor(&value, ccl::dtype::kFloat32, 1, {kDLOpenCL, 0});
      world->AllReduce(tensor, tensor, ccl::ReduceOp::kSum);
    }
    if (!right) std::fprintf(stderr, "device_groups: a sum is wrong\n");
    return right ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "device_groups: %s\n", error.what());
    return 1;
  }
}
