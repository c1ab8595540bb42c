// A framework's view of an installed InfiniCCL: find_package, link, load the
// CPU backend from the installed lib/, run one collective.
#include <cstdio>
#include <vector>

#include "infini/ccl/ccl.h"

int main() {
  auto backend = infini::ccl::Backend::Load("gloo");
  auto comm = backend->CommInitRank(1, backend->GetUniqueId(), 0);
  std::vector<float> data{1, 2, 3};
  infini::ccl::FlatTensor tensor(data.data(), infini::ccl::dtype::kFloat32, 3, DLDevice{kDLCPU, 0});
  comm.AllReduce(tensor, tensor, infini::ccl::ReduceOp::kSum);
  std::printf("loaded %s; all_reduce over 1 rank left %g\n", backend->info().library_path.c_str(),
              data[2]);
  return data[2] == 3.0f ? 0 : 1;
}
