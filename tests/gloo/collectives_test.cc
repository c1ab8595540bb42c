// Every collective × dtype × op of the gloo backend against a host
// reference: world sizes 1, 2, 3, 8, ranks as threads and as processes,
// in place (NCCL's layouts) and out of place, count 0 and odd counts.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "host_values.h"
#include "rank_runner.h"

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
std::string Describe(const char* collective, const TestType& type, const std::string& op,
                     size_t count, bool in_place, const ccl::Communicator& comm) {
  return std::string(collective) + " " + type.name + " " + op + " count=" + std::to_string(count) +
         (in_place ? " in-place" : " out-of-place") + " rank " + std::to_string(comm.rank()) + "/" +
         std::to_string(comm.world_size());
}

// Expects output[i] == want(i) for every i; reports the first mismatch only.
void ExpectValues(const TestType& type, const HostValues& output,
                  const std::function<double(size_t)>& want, const std::string& what) {
  for (size_t i = 0; i < output.count(); ++i) {
    if (!CloseEnough(type, output.Get(i), want(i))) {
      ADD_FAILURE() << what << ": element " << i << " is " << output.Get(i) << ", expected "
                    << want(i);
      return;
    }
  }
}

DeviceBuffer Upload(const ccl::Communicator& comm, const HostValues& values) {
  DeviceBuffer buffer(comm.backend(), values.bytes());
  buffer.CopyFromHost(values.data(), values.bytes());
  return buffer;
}

HostValues Download(const DeviceBuffer& buffer, const TestType& type, size_t count) {
  HostValues values(type, count);
  buffer.CopyToHost(values.data(), values.bytes());
  return values;
}

void CheckAllReduce(ccl::Communicator& comm, const TestType& type, ReduceOp op, size_t count,
                    bool in_place) {
  const auto what =
      Describe("all_reduce", type, std::string(ccl::ReduceOpName(op)), count, in_place, comm);
  HostValues input(type, count);
  for (size_t i = 0; i < count; ++i) input.Set(i, InputValue(type, op, comm.rank(), i));
  DeviceBuffer send = Upload(comm, input);
  DeviceBuffer recv(comm.backend(), input.bytes());
  const DeviceBuffer& result = in_place ? send : recv;
  comm.AllReduce(send.AsTensor(type.dtype, count), result.AsTensor(type.dtype, count), op);
  ExpectValues(
      type, Download(result, type, count),
      [&](size_t i) { return ReferenceValue(type, op, comm.world_size(), i); }, what);
}

void CheckReduce(ccl::Communicator& comm, const TestType& type, ReduceOp op, size_t count,
                 bool in_place) {
  const auto what =
      Describe("reduce", type, std::string(ccl::ReduceOpName(op)), count, in_place, comm);
  const int root = static_cast<int>(count % comm.world_size());
  HostValues input(type, count);
  HostValues sentinel(type, count);
  for (size_t i = 0; i < count; ++i) {
    input.Set(i, InputValue(type, op, comm.rank(), i));
    sentinel.Set(i, 3);
  }
  DeviceBuffer send = Upload(comm, input);
  DeviceBuffer recv = Upload(comm, sentinel);
  const DeviceBuffer& result = in_place ? send : recv;
  comm.Reduce(send.AsTensor(type.dtype, count), result.AsTensor(type.dtype, count), op, root);
  if (comm.rank() == root) {
    ExpectValues(
        type, Download(result, type, count),
        [&](size_t i) { return ReferenceValue(type, op, comm.world_size(), i); }, what);
  } else {
    // A non-root's recvbuff is not written (NCCL: it is ignored).
    const HostValues& before = in_place ? input : sentinel;
    ExpectValues(
        type, Download(result, type, count), [&](size_t i) { return before.Get(i); },
        what + " (non-root buffer must be untouched)");
  }
}

void CheckReduceScatter(ccl::Communicator& comm, const TestType& type, ReduceOp op, size_t count,
                        bool in_place) {
  const auto what =
      Describe("reduce_scatter", type, std::string(ccl::ReduceOpName(op)), count, in_place, comm);
  const size_t total = count * comm.world_size();
  HostValues input(type, total);
  for (size_t j = 0; j < total; ++j) input.Set(j, InputValue(type, op, comm.rank(), j));
  DeviceBuffer send = Upload(comm, input);
  DeviceBuffer recv(comm.backend(), input.bytes() / comm.world_size());
  // In place (NCCL): recvbuff is block `rank` of sendbuff.
  const ccl::FlatTensor result = in_place ? send.AsTensor(type.dtype, count, comm.rank() * count)
                                          : recv.AsTensor(type.dtype, count);
  comm.ReduceScatter(send.AsTensor(type.dtype, total), result, op);
  HostValues output(type, count);
  if (in_place) {
    send.CopyToHost(output.data(), output.bytes(), comm.rank() * output.bytes());
  } else {
    recv.CopyToHost(output.data(), output.bytes());
  }
  const size_t first = comm.rank() * count;
  ExpectValues(
      type, output,
      [&](size_t i) { return ReferenceValue(type, op, comm.world_size(), first + i); }, what);
}

void CheckBroadcast(ccl::Communicator& comm, const TestType& type, size_t count, bool in_place) {
  const auto what = Describe("broadcast", type, "-", count, in_place, comm);
  const int root = static_cast<int>((count + 1) % comm.world_size());
  HostValues input(type, count);
  for (size_t i = 0; i < count; ++i) input.Set(i, InputValue(type, ReduceOp::kSum, comm.rank(), i));
  DeviceBuffer send = Upload(comm, input);
  DeviceBuffer recv(comm.backend(), input.bytes());
  const DeviceBuffer& result = in_place ? send : recv;
  comm.Broadcast(send.AsTensor(type.dtype, count), result.AsTensor(type.dtype, count), root);
  ExpectValues(
      type, Download(result, type, count),
      [&](size_t i) { return InputValue(type, ReduceOp::kSum, root, i); }, what);
}

void CheckAllGather(ccl::Communicator& comm, const TestType& type, size_t count, bool in_place) {
  const auto what = Describe("all_gather", type, "-", count, in_place, comm);
  const size_t total = count * comm.world_size();
  HostValues input(type, count);
  for (size_t i = 0; i < count; ++i) input.Set(i, InputValue(type, ReduceOp::kSum, comm.rank(), i));
  DeviceBuffer send = Upload(comm, input);
  DeviceBuffer recv(comm.backend(), input.bytes() * comm.world_size());
  if (in_place) recv.CopyFromHost(input.data(), input.bytes(), comm.rank() * input.bytes());
  // In place (NCCL): sendbuff is block `rank` of recvbuff.
  const ccl::FlatTensor source = in_place ? recv.AsTensor(type.dtype, count, comm.rank() * count)
                                          : send.AsTensor(type.dtype, count);
  comm.AllGather(source, recv.AsTensor(type.dtype, total));
  ExpectValues(
      type, Download(recv, type, total),
      [&](size_t j) {
        return InputValue(type, ReduceOp::kSum, static_cast<int>(j / count), j % count);
      },
      what);
}

double AllToAllValue(int from_rank, int to_rank, size_t index) {
  return static_cast<double>((from_rank * 3 + to_rank * 5 + index) % 50);
}

void CheckAllToAll(ccl::Communicator& comm, const TestType& type, size_t count) {
  const auto what = Describe("all_to_all", type, "-", count, false, comm);
  const int world_size = comm.world_size();
  const size_t total = count * world_size;
  HostValues input(type, total);
  for (size_t j = 0; j < total; ++j) {
    input.Set(j, AllToAllValue(comm.rank(), static_cast<int>(j / count), j % count));
  }
  DeviceBuffer send = Upload(comm, input);
  DeviceBuffer recv(comm.backend(), input.bytes());
  comm.AllToAll(send.AsTensor(type.dtype, total), recv.AsTensor(type.dtype, total));
  ExpectValues(
      type, Download(recv, type, total),
      [&](size_t j) { return AllToAllValue(static_cast<int>(j / count), comm.rank(), j % count); },
      what);
}

// Every case, in the same order on every rank.
void RunEveryCollective(ccl::Communicator& comm, Launch launch) {
  for (const TestType& type : AllTestTypes()) {
    for (size_t count : Counts(launch)) {
      for (bool in_place : {false, true}) {
        for (ReduceOp op : AllReduceOps()) {
          CheckAllReduce(comm, type, op, count, in_place);
          CheckReduce(comm, type, op, count, in_place);
          CheckReduceScatter(comm, type, op, count, in_place);
        }
        CheckBroadcast(comm, type, count, in_place);
        CheckAllGather(comm, type, count, in_place);
      }
      if (count > 0) CheckAllToAll(comm, type, count);
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
        const TestType& type = AllTestTypes()[8];  // float32
        ASSERT_STREQ(type.name, "float32");
        CheckAllReduce(comm, type, ReduceOp::kSum, 1 << 20, false);
        CheckReduceScatter(comm, type, ReduceOp::kMax, 1 << 18, true);
      },
      TestConfig());
}

}  // namespace
}  // namespace infini::gloo_test
