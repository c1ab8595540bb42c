// What a framework with an NCCL-shaped layer calls, on real gloo ranks
// (docs/adopting.md): the raw-pointer forms of the collectives, NULL buffers
// where NCCL ignores them (off the root), the move-only types (int16, uint16,
// bool, fp8) on every data-movement collective, and the device a
// communicator was made on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rank_runner.h"
#include "reference_buffers.h"

namespace infini::gloo_test {
namespace {

using ccl::DeviceBuffer;
using ccl::ReduceOp;

ccl::CommConfig TestConfig() {
  ccl::CommConfig config;
  config.timeout_ms = 60000;
  return config;
}

// Every type of the C++ API that gloo moves but does not reduce.
std::vector<DLDataType> MoveOnlyTypes() {
  std::vector<DLDataType> types;
  for (DLDataType dtype : reference::AllDataTypes()) {
    bool reducible = false;
    for (DLDataType other : ReducibleTypes())
      reducible = reducible || ccl::operator==(dtype, other);
    if (!reducible) types.push_back(dtype);
  }
  return types;
}

std::vector<double> Moved(const ccl::Communicator& comm, DLDataType dtype, int64_t count) {
  return reference::InputValues(dtype, std::nullopt, comm.rank(), comm.world_size(), 0, count);
}

std::string What(const char* collective, DLDataType dtype, const ccl::Communicator& comm) {
  return std::string(collective) + " " + ccl::DataTypeName(dtype) + " rank " +
         std::to_string(comm.rank()) + "/" + std::to_string(comm.world_size());
}

// Broadcast, all_gather, all_to_all, a send/recv ring, gather and scatter of
// `dtype`, each against the host reference; the raw-pointer forms where
// there is one.
void MoveEveryWay(ccl::Communicator& comm, DLDataType dtype) {
  const int world = comm.world_size();
  const int rank = comm.rank();
  const int64_t n = 37;
  const int64_t total = n * world;
  const int root = world - 1;
  const size_t width = ccl::ElementBytes(dtype);

  DeviceBuffer mine = Upload(comm, dtype, Moved(comm, dtype, total));
  DeviceBuffer out(comm.backend(), static_cast<size_t>(total) * width);

  comm.Broadcast(mine.data(), out.data(), n, dtype, root);
  ExpectMatches(dtype, std::nullopt, world, reference::ExpectBroadcast(dtype, world, root, n),
                Download(out, dtype, n), What("broadcast", dtype, comm));

  comm.AllGather(mine.data(), out.data(), n, dtype);
  ExpectMatches(dtype, std::nullopt, world, reference::ExpectAllGather(dtype, world, n),
                Download(out, dtype, total), What("all_gather", dtype, comm));

  comm.AllToAll(mine.data(), out.data(), n, dtype);
  ExpectMatches(dtype, std::nullopt, world, reference::ExpectAllToAll(dtype, world, rank, n),
                Download(out, dtype, total), What("all_to_all", dtype, comm));

  const int right = (rank + 1) % world, left = (rank + world - 1) % world;
  comm.backend()->GroupStart();
  comm.Send(mine.data(), n, dtype, right);
  comm.Recv(out.data(), n, dtype, left);
  comm.backend()->GroupEnd();
  ExpectMatches(dtype, std::nullopt, world, reference::ExpectReceived(dtype, world, left, n),
                Download(out, dtype, n), What("send/recv", dtype, comm));

  comm.Gather(mine.AsTensor(dtype, n), out.AsTensor(dtype, total), root);
  if (rank == root) {
    ExpectMatches(dtype, std::nullopt, world, reference::ExpectAllGather(dtype, world, n),
                  Download(out, dtype, total), What("gather", dtype, comm));
  }

  comm.Scatter(mine.AsTensor(dtype, total), out.AsTensor(dtype, n), root);
  ExpectMatches(dtype, std::nullopt, world, reference::ExpectScatter(dtype, world, root, rank, n),
                Download(out, dtype, n), What("scatter", dtype, comm));
}

class GlooFrameworkCalls : public ::testing::TestWithParam<std::tuple<Launch, int>> {};

TEST_P(GlooFrameworkCalls, MoveOnlyTypesMoveOnEveryDataMovementCollective) {
  const auto [launch, world_size] = GetParam();
  RunRanks(
      launch, world_size,
      [](ccl::Communicator& comm) {
        for (DLDataType dtype : MoveOnlyTypes()) MoveEveryWay(comm, dtype);
      },
      TestConfig());
}

// Off the root, NCCL ignores broadcast's send, reduce's recv, gather's recv
// and scatter's send: NULL there, in both API forms.
TEST_P(GlooFrameworkCalls, NullBuffersOffTheRootAreAccepted) {
  const auto [launch, world_size] = GetParam();
  RunRanks(
      launch, world_size,
      [](ccl::Communicator& comm) {
        const int world = comm.world_size(), rank = comm.rank();
        const int root = world - 1;
        const bool is_root = rank == root;
        const DLDataType f32 = ccl::dtype::kFloat32;
        const int64_t n = 130, total = n * world;
        DeviceBuffer input = Upload(comm, f32, Moved(comm, f32, total));
        DeviceBuffer sums =
            Upload(comm, f32, reference::InputValues(f32, ReduceOp::kSum, rank, world, 0, n));
        DeviceBuffer out(comm.backend(), static_cast<size_t>(total) * sizeof(float));
        const ccl::FlatTensor nothing_n(nullptr, f32, n, comm.device());
        const ccl::FlatTensor nothing_total(nullptr, f32, total, comm.device());

        comm.Broadcast(is_root ? input.data() : nullptr, out.data(), n, f32, root);
        ExpectMatches(f32, std::nullopt, world, reference::ExpectBroadcast(f32, world, root, n),
                      Download(out, f32, n), What("raw broadcast, NULL send off root", f32, comm));
        comm.Broadcast(is_root ? input.AsTensor(f32, n) : nothing_n, out.AsTensor(f32, n), root);
        ExpectMatches(f32, std::nullopt, world, reference::ExpectBroadcast(f32, world, root, n),
                      Download(out, f32, n), What("broadcast, NULL send off root", f32, comm));

        for (int form = 0; form < 2; ++form) {
          if (form == 0) {
            comm.Reduce(sums.data(), is_root ? out.data() : nullptr, n, f32, ReduceOp::kSum, root);
          } else {
            comm.Reduce(sums.AsTensor(f32, n), is_root ? out.AsTensor(f32, n) : nothing_n,
                        ReduceOp::kSum, root);
          }
          if (is_root) {
            ExpectMatches(f32, ReduceOp::kSum, world,
                          reference::ExpectAllReduce(f32, ReduceOp::kSum, world, n),
                          Download(out, f32, n), What("reduce, NULL recv off root", f32, comm));
          }
        }

        comm.Gather(input.AsTensor(f32, n), is_root ? out.AsTensor(f32, total) : nothing_total,
                    root);
        if (is_root) {
          ExpectMatches(f32, std::nullopt, world, reference::ExpectAllGather(f32, world, n),
                        Download(out, f32, total), What("gather, NULL recv off root", f32, comm));
        }
        comm.Scatter(is_root ? input.AsTensor(f32, total) : nothing_total, out.AsTensor(f32, n),
                     root);
        ExpectMatches(f32, std::nullopt, world, reference::ExpectScatter(f32, world, root, rank, n),
                      Download(out, f32, n), What("scatter, NULL send off root", f32, comm));
      },
      TestConfig());
}

// NCCL's in-place forms through raw pointers: all_reduce onto itself,
// all_gather from this rank's block of recv, reduce_scatter into this
// rank's block of send.
TEST_P(GlooFrameworkCalls, RawPointerReductionsInPlaceMatchTheReference) {
  const auto [launch, world_size] = GetParam();
  RunRanks(
      launch, world_size,
      [](ccl::Communicator& comm) {
        const int world = comm.world_size(), rank = comm.rank();
        const DLDataType i32 = ccl::dtype::kInt32;
        const int64_t n = 61, total = n * world;
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          DeviceBuffer data = Upload(comm, i32, reference::InputValues(i32, op, rank, world, 0, n));
          comm.AllReduce(data.data(), data.data(), n, i32, op);
          ExpectMatches(i32, op, world, reference::ExpectAllReduce(i32, op, world, n),
                        Download(data, i32, n), What("raw all_reduce in place", i32, comm));

          DeviceBuffer blocks =
              Upload(comm, i32, reference::InputValues(i32, op, rank, world, 0, total));
          int32_t* own = static_cast<int32_t*>(blocks.data()) + rank * n;
          comm.ReduceScatter(blocks.data(), own, n, i32, op);
          ExpectMatches(i32, op, world, reference::ExpectReduceScatter(i32, op, world, rank, n),
                        Download(blocks, i32, n, rank * n),
                        What("raw reduce_scatter in place", i32, comm));
        }
        const std::vector<double> input = Moved(comm, i32, n);
        const std::vector<unsigned char> bytes = reference::Encode(i32, input);
        DeviceBuffer gathered(comm.backend(), bytes.size() * world);
        gathered.CopyFromHost(bytes.data(), bytes.size(), rank * bytes.size());
        comm.AllGather(static_cast<int32_t*>(gathered.data()) + rank * n, gathered.data(), n, i32);
        ExpectMatches(i32, std::nullopt, world, reference::ExpectAllGather(i32, world, n),
                      Download(gathered, i32, total), What("raw all_gather in place", i32, comm));
      },
      TestConfig());
}

INSTANTIATE_TEST_SUITE_P(Layouts, GlooFrameworkCalls,
                         ::testing::Values(std::make_tuple(Launch::kThreads, 1),
                                           std::make_tuple(Launch::kThreads, 3),
                                           std::make_tuple(Launch::kProcesses, 2)),
                         [](const ::testing::TestParamInfo<std::tuple<Launch, int>>& param_info) {
                           return std::string(LaunchName(std::get<0>(param_info.param))) +
                                  "_world" + std::to_string(std::get<1>(param_info.param));
                         });

TEST(GlooFrameworkCalls, Int16ReductionsAreRefusedAsOnNccl) {
  RunRanks(Launch::kThreads, 1, [](ccl::Communicator& comm) {
    int16_t value = 1;
    try {
      comm.AllReduce(&value, &value, 1, ccl::dtype::kInt16, ReduceOp::kSum);
      ADD_FAILURE() << "an all_reduce of int16 was accepted";
    } catch (const ccl::Error& error) {
      EXPECT_EQ(error.code(), infiniCclUnsupported) << error.what();
      EXPECT_NE(std::string(error.what()).find("all_reduce on int16 with sum"), std::string::npos)
          << error.what();
    }
  });
}

TEST(GlooFrameworkCalls, EachRankOfCommInitRanksRecordsItsDevice) {
  const std::vector<int> devices = {3, 5};
  std::vector<ccl::Communicator> comms = GlooBackend()->CommInitAll(devices);
  ASSERT_EQ(comms.size(), 2u);
  for (size_t i = 0; i < comms.size(); ++i) {
    EXPECT_EQ(comms[i].device().device_type, kDLCPU);
    EXPECT_EQ(comms[i].device().device_id, devices[i]);
  }
  GlooBackend()->SetDevice(4);
  ccl::Communicator one = GlooBackend()->CommInitRank(1, GlooBackend()->GetUniqueId(), 0);
  EXPECT_EQ(one.device().device_id, 4);
  GlooBackend()->SetDevice(0);
}

}  // namespace
}  // namespace infini::gloo_test
