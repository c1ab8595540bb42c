// distributed_basics: section 3 of the torch.distributed guide in C++ over
// InfiniCCL (docs/parallel.md, "From torch.distributed"): init, the
// collectives of the default group, new_group of {0, 1} and {2, 3}, destroy.
//
//   infini_run --ccl_backend=gloo --nproc_per_node=4 distributed_basics
//
// Every rank checks every result and prints one line; exit 0 when all are
// right, 1 on a wrong value or a failure, 2 when not run with 4 ranks.
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/parallel/context.h"
#include "infini/parallel/process_group.h"

namespace {

using infini::ccl::DeviceBuffer;
using infini::ccl::ReduceOp;
using infini::parallel::Context;
using infini::parallel::ProcessGroup;

constexpr int kWorldSize = 4;  // the guide's example: groups {0, 1} and {2, 3}
constexpr size_t kCount = 3;   // elements of each rank's tensor

// A tensor on the rank's device, from host values (torch.tensor(values)).
DeviceBuffer Tensor(const Context& context, const std::vector<float>& values) {
  DeviceBuffer buffer(context.backend(), values.size() * sizeof(float));
  buffer.CopyFromHost(values.data(), values.size() * sizeof(float));
  return buffer;
}

infini::ccl::FlatTensor View(const DeviceBuffer& buffer) {
  return buffer.AsTensor(infini::ccl::dtype::kFloat32,
                         static_cast<int64_t>(buffer.bytes() / sizeof(float)));
}

std::vector<float> Values(const DeviceBuffer& buffer) {
  std::vector<float> values(buffer.bytes() / sizeof(float));
  buffer.CopyToHost(values.data(), buffer.bytes());
  return values;
}

void Expect(const std::string& what, const std::vector<float>& got,
            const std::vector<float>& expected) {
  if (got != expected) {
    std::string text = what + ": got";
    for (float value : got) text += " " + std::to_string(value);
    throw std::runtime_error(text);
  }
}

// rank r contributes r + 1, r + 2, ...: torch.arange(kCount) + rank + 1.
std::vector<float> Contribution(int rank) {
  std::vector<float> values(kCount);
  for (size_t i = 0; i < kCount; ++i) values[i] = static_cast<float>(rank + 1) + i;
  return values;
}

// all_reduce(sum) over `group`: the sum of its members' contributions.
void AllReduceOver(const Context& context, ProcessGroup& group, const std::string& name) {
  DeviceBuffer tensor = Tensor(context, Contribution(context.rank().global_rank()));
  group.AllReduce(View(tensor), View(tensor), ReduceOp::kSum);  // in place, like torch's
  std::vector<float> expected(kCount, 0);
  for (int member : group.members()) {
    for (size_t i = 0; i < kCount; ++i) expected[i] += Contribution(member)[i];
  }
  Expect("all_reduce on " + name, Values(tensor), expected);
}

}  // namespace

int main() {
  try {
    // 1. dist.init_process_group(backend=...): the backend comes from
    //    infini_run --ccl_backend (INFINI_CCL_BACKEND), rank and world size
    //    from the launcher's variables, as torchrun's.
    std::shared_ptr<Context> context = Context::Create();
    std::unique_ptr<ProcessGroup> world = context->NewWorldGroup();
    const int rank = world->rank();        // dist.get_rank()
    const int world_size = world->size();  // dist.get_world_size()
    if (world_size != kWorldSize) {
      std::fprintf(stderr,
                   "distributed_basics: world size %d: expected 4 ranks (infini_run "
                   "--nproc_per_node=4), for the groups {0, 1} and {2, 3}\n",
                   world_size);
      return 2;
    }

    // 2. Collectives on the default group, in the same order on every rank.
    AllReduceOver(*context, *world, "the world");  // dist.all_reduce(tensor, op=SUM)

    DeviceBuffer tensor = Tensor(*context, Contribution(rank));
    world->Broadcast(View(tensor), View(tensor), 0);  // dist.broadcast(tensor, src=0)
    Expect("broadcast from 0", Values(tensor), Contribution(0));

    DeviceBuffer mine = Tensor(*context, Contribution(rank));  // dist.all_gather(list, tensor)
    DeviceBuffer gathered = Tensor(*context, std::vector<float>(kCount * world_size, -1));
    world->AllGather(View(mine), View(gathered));
    std::vector<float> expected;
    for (int r = 0; r < world_size; ++r) {
      for (float value : Contribution(r)) expected.push_back(value);
    }
    Expect("all_gather", Values(gathered), expected);

    world->Barrier();  // dist.barrier()

    // dist.new_group(ranks=[0, 1]) and ([2, 3]): every rank makes both, in
    // the same order; only members use one.
    std::unique_ptr<ProcessGroup> group_01 = context->NewGroup("group_01", {0, 1});
    std::unique_ptr<ProcessGroup> group_23 = context->NewGroup("group_23", {2, 3});
    if (group_01->is_member()) AllReduceOver(*context, *group_01, "group_01");
    if (group_23->is_member()) AllReduceOver(*context, *group_23, "group_23");

    // 3. dist.destroy_process_group(group_01), (group_23), then the default
    //    group and the rest: each communicator goes with its group.
    group_01.reset();
    group_23.reset();
    world.reset();
    context.reset();
    std::printf(
        "distributed_basics: rank %d of %d: all_reduce, broadcast, all_gather, barrier "
        "and new_group correct\n",
        rank, world_size);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "distributed_basics: %s\n", error.what());
    return 1;
  }
}
