// Every collective × dtype × op of the gloo backend against the shared host
// reference (infini/conformance/reference.h): world sizes 1, 2, 3, 8, ranks as threads and as
// processes, in place (NCCL's layouts) and out of place, count 0 and odd counts.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "rank_runner.h"
#include "reference_buffers.h"

namespace infini::gloo_test {
namespace {

using ccl::DeviceBuffer;
using ccl::ReduceOp;

// Threads run the whole set; processes (slower to schedule on a small CI
// machine) run count 0 and one odd count, which is what differs for them.
const std::vector<size_t>& Counts(Launch launch) {
  static const std::vector<size_t> thread_counts = {0, 1, 7, 130};
  static const std::vector<size_t> process_counts = {0, 7};
  return launch == Launch::kThreads ? thread_counts : process_counts;
}

ccl::CommConfig TestConfig() {
  ccl::CommConfig config;
  config.timeout_ms = 60000;  // a broken collective fails instead of hanging the suite
  return config;
}

// What one case is, for failure messages.
std::string Describe(const char* collective, DLDataType dtype, const std::string& op, size_t count,
                     bool in_place, const ccl::Communicator& comm) {
  return std::string(collective) + " " + ccl::DataTypeName(dtype) + " " + op +
         " count=" + std::to_string(count) + (in_place ? " in-place" : " out-of-place") + " rank " +
         std::to_string(comm.rank()) + "/" + std::to_string(comm.world_size());
}

void CheckAllReduce(ccl::Communicator& comm, DLDataType dtype, ReduceOp op, size_t count,
                    bool in_place) {
  const auto what =
      Describe("all_reduce", dtype, std::string(ccl::ReduceOpName(op)), count, in_place, comm);
  const int world = comm.world_size();
  const auto n = static_cast<int64_t>(count);
  DeviceBuffer send =
      Upload(comm, dtype, reference::InputValues(dtype, op, comm.rank(), world, 0, n));
  DeviceBuffer recv(comm.backend(), send.bytes());
  const DeviceBuffer& result = in_place ? send : recv;
  comm.AllReduce(send.AsTensor(dtype, n), result.AsTensor(dtype, n), op);
  ExpectMatches(dtype, op, world, reference::ExpectAllReduce(dtype, op, world, n),
                Download(result, dtype, count), what);
}

void CheckReduce(ccl::Communicator& comm, DLDataType dtype, ReduceOp op, size_t count,
                 bool in_place) {
  const auto what =
      Describe("reduce", dtype, std::string(ccl::ReduceOpName(op)), count, in_place, comm);
  const int world = comm.world_size();
  const auto n = static_cast<int64_t>(count);
  const int root = static_cast<int>(count % world);
  const std::vector<double> input = reference::InputValues(dtype, op, comm.rank(), world, 0, n);
  const std::vector<double> sentinel(count, 3);
  DeviceBuffer send = Upload(comm, dtype, input);
  DeviceBuffer recv = Upload(comm, dtype, sentinel);
  const DeviceBuffer& result = in_place ? send : recv;
  comm.Reduce(send.AsTensor(dtype, n), result.AsTensor(dtype, n), op, root);
  if (comm.rank() == root) {
    ExpectMatches(dtype, op, world, reference::ExpectAllReduce(dtype, op, world, n),
                  Download(result, dtype, count), what);
  } else {
    // A non-root's recvbuff is not written (NCCL: it is ignored).
    ExpectMatches(dtype, std::nullopt, world, in_place ? input : sentinel,
                  Download(result, dtype, count), what + " (non-root buffer must be untouched)");
  }
}

void CheckReduceScatter(ccl::Communicator& comm, DLDataType dtype, ReduceOp op, size_t count,
                        bool in_place) {
  const auto what =
      Describe("reduce_scatter", dtype, std::string(ccl::ReduceOpName(op)), count, in_place, comm);
  const int world = comm.world_size();
  const auto n = static_cast<int64_t>(count);
  const int64_t total = n * world;
  DeviceBuffer send =
      Upload(comm, dtype, reference::InputValues(dtype, op, comm.rank(), world, 0, total));
  DeviceBuffer recv(comm.backend(), count * ccl::ElementBytes(dtype));
  // In place (NCCL): recvbuff is block `rank` of sendbuff.
  const ccl::FlatTensor result =
      in_place ? send.AsTensor(dtype, n, comm.rank() * n) : recv.AsTensor(dtype, n);
  comm.ReduceScatter(send.AsTensor(dtype, total), result, op);
  const std::vector<double> output =
      in_place ? Download(send, dtype, count, comm.rank() * count) : Download(recv, dtype, count);
  ExpectMatches(dtype, op, world, reference::ExpectReduceScatter(dtype, op, world, comm.rank(), n),
                output, what);
}

void CheckBroadcast(ccl::Communicator& comm, DLDataType dtype, size_t count, bool in_place) {
  const auto what = Describe("broadcast", dtype, "-", count, in_place, comm);
  const int world = comm.world_size();
  const auto n = static_cast<int64_t>(count);
  const int root = static_cast<int>((count + 1) % world);
  DeviceBuffer send =
      Upload(comm, dtype, reference::InputValues(dtype, std::nullopt, comm.rank(), world, 0, n));
  DeviceBuffer recv(comm.backend(), send.bytes());
  const DeviceBuffer& result = in_place ? send : recv;
  comm.Broadcast(send.AsTensor(dtype, n), result.AsTensor(dtype, n), root);
  ExpectMatches(dtype, std::nullopt, world, reference::ExpectBroadcast(dtype, world, root, n),
                Download(result, dtype, count), what);
}

void CheckAllGather(ccl::Communicator& comm, DLDataType dtype, size_t count, bool in_place) {
  const auto what = Describe("all_gather", dtype, "-", count, in_place, comm);
  const int world = comm.world_size();
  const auto n = static_cast<int64_t>(count);
  const int64_t total = n * world;
  const std::vector<double> input =
      reference::InputValues(dtype, std::nullopt, comm.rank(), world, 0, n);
  const std::vector<unsigned char> input_bytes = reference::Encode(dtype, input);
  DeviceBuffer send = Upload(comm, dtype, input);
  DeviceBuffer recv(comm.backend(), input_bytes.size() * world);
  if (in_place && !input_bytes.empty()) {
    recv.CopyFromHost(input_bytes.data(), input_bytes.size(), comm.rank() * input_bytes.size());
  }
  // In place (NCCL): sendbuff is block `rank` of recvbuff.
  const ccl::FlatTensor source =
      in_place ? recv.AsTensor(dtype, n, comm.rank() * n) : send.AsTensor(dtype, n);
  comm.AllGather(source, recv.AsTensor(dtype, total));
  ExpectMatches(dtype, std::nullopt, world, reference::ExpectAllGather(dtype, world, n),
                Download(recv, dtype, static_cast<size_t>(total)), what);
}

void CheckAllToAll(ccl::Communicator& comm, DLDataType dtype, size_t count) {
  const auto what = Describe("all_to_all", dtype, "-", count, false, comm);
  const int world = comm.world_size();
  const auto n = static_cast<int64_t>(count);
  const int64_t total = n * world;
  DeviceBuffer send = Upload(
      comm, dtype, reference::InputValues(dtype, std::nullopt, comm.rank(), world, 0, total));
  DeviceBuffer recv(comm.backend(), send.bytes());
  comm.AllToAll(send.AsTensor(dtype, total), recv.AsTensor(dtype, total));
  ExpectMatches(dtype, std::nullopt, world, reference::ExpectAllToAll(dtype, world, comm.rank(), n),
                Download(recv, dtype, static_cast<size_t>(total)), what);
}

// Every case, in the same order on every rank.
void RunEveryCollective(ccl::Communicator& comm, Launch launch) {
  for (DLDataType dtype : ReducibleTypes()) {
    for (size_t count : Counts(launch)) {
      for (bool in_place : {false, true}) {
        for (ReduceOp op : reference::AllReduceOps()) {
          CheckAllReduce(comm, dtype, op, count, in_place);
          CheckReduce(comm, dtype, op, count, in_place);
          CheckReduceScatter(comm, dtype, op, count, in_place);
        }
        CheckBroadcast(comm, dtype, count, in_place);
        CheckAllGather(comm, dtype, count, in_place);
      }
      if (count > 0) CheckAllToAll(comm, dtype, count);
    }
  }
  comm.Barrier();
}

class GlooCollectives : public ::testing::TestWithParam<std::tuple<Launch, int>> {};

TEST_P(GlooCollectives, EveryCollectiveTypeAndOpMatchesHostReference) {
  const auto [launch, world_size] = GetParam();
  RunRanks(
      launch, world_size,
      [launch = launch](ccl::Communicator& comm) { RunEveryCollective(comm, launch); },
      TestConfig());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectives,
                         ::testing::Combine(::testing::Values(Launch::kThreads, Launch::kProcesses),
                                            ::testing::Values(1, 2, 3, 8)),
                         [](const ::testing::TestParamInfo<std::tuple<Launch, int>>& param_info) {
                           return std::string(LaunchName(std::get<0>(param_info.param))) +
                                  "_world" + std::to_string(std::get<1>(param_info.param));
                         });

// Many ring segments: counts large enough for gloo to split the data.
TEST(GlooCollectivesLarge, AllReduceAndReduceScatterOfOneMillionFloatsAreExact) {
  RunRanks(
      Launch::kThreads, 3,
      [](ccl::Communicator& comm) {
        CheckAllReduce(comm, ccl::dtype::kFloat32, ReduceOp::kSum, 1 << 20, false);
        CheckReduceScatter(comm, ccl::dtype::kFloat32, ReduceOp::kMax, 1 << 18, true);
      },
      TestConfig());
}

}  // namespace
}  // namespace infini::gloo_test
