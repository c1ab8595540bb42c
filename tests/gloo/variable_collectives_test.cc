// all_to_all_v, all_gather_v, reduce_scatter_v, gather and scatter of the
// gloo backend against host values: 2 and 3 ranks as threads, as threads
// meeting through a host bootstrap, and as processes; uneven counts with
// zeros, displacements that leave gaps and reverse the rank order, all-zero
// counts, and the one-byte types that are only moved (bool, fp8).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "host_values.h"
#include "rank_runner.h"

namespace infini::gloo_test {
namespace {

using ccl::DeviceBuffer;
using ccl::ReduceOp;

// Types that collectives only move: one of each width, and the one-byte
// types the backend moves but never reduces.
const std::vector<TestType>& MovedTypes() {
  static const std::vector<TestType> types = {
      AllTestTypes()[0],  // int8
      AllTestTypes()[6],  // float16
      AllTestTypes()[8],  // float32
      AllTestTypes()[9],  // float64
      {DLDataType{INFINI_CCL_DL_BOOL, 8, 1}, "bool", false, false},
      {DLDataType{INFINI_CCL_DL_FLOAT8_E4M3FN, 8, 1}, "float8_e4m3fn", false, false},
  };
  return types;
}

// The value rank `from` sends rank `to` at `index` (0/1 for bool).
double Moved(const TestType& type, int from, int to, size_t index) {
  const double value = static_cast<double>((from * 3 + to * 5 + index) % 50);
  return type.dtype.code == INFINI_CCL_DL_BOOL ? static_cast<double>(static_cast<int>(value) % 2)
                                               : value;
}

constexpr double kGapValue = 1;  // what a gap between blocks holds, and keeps

// Blocks of `counts` laid out in reverse rank order with a gap of one
// element after each: displacements no packed layout would give.
struct Layout {
  std::vector<size_t> counts;
  std::vector<size_t> displacements;
  size_t extent = 0;
};

Layout ReversedWithGaps(const std::vector<size_t>& counts) {
  Layout layout{counts, std::vector<size_t>(counts.size()), 0};
  for (size_t r = counts.size(); r-- > 0;) {
    layout.displacements[r] = layout.extent;
    layout.extent += counts[r] + 1;
  }
  return layout;
}

// Elements rank `from` sends rank `to`: uneven, some zero; all zero when
// `zero` (every rank then calls with empty blocks).
size_t PairCount(int from, int to, bool zero) {
  return zero ? 0 : static_cast<size_t>((from + 2 * to + 1) % 4);
}

DeviceBuffer Upload(const ccl::Communicator& comm, const HostValues& values) {
  DeviceBuffer buffer(comm.backend(), values.bytes());
  if (values.bytes() > 0) buffer.CopyFromHost(values.data(), values.bytes());
  return buffer;
}

HostValues Download(const DeviceBuffer& buffer, const TestType& type, size_t count) {
  HostValues values(type, count);
  if (values.bytes() > 0) buffer.CopyToHost(values.data(), values.bytes());
  return values;
}

HostValues Filled(const TestType& type, size_t count, double value) {
  HostValues values(type, count);
  for (size_t i = 0; i < count; ++i) values.Set(i, value);
  return values;
}

// Expects element i of `got` to be want(i); reports the first mismatch.
template <class Want>
void ExpectEach(const TestType& type, const HostValues& got, Want want, const std::string& what) {
  for (size_t i = 0; i < got.count(); ++i) {
    if (!CloseEnough(type, got.Get(i), want(i))) {
      ADD_FAILURE() << what << ": element " << i << " is " << got.Get(i) << ", expected "
                    << want(i);
      return;
    }
  }
}

std::string Describe(const char* collective, const TestType& type, const ccl::Communicator& comm,
                     const std::string& detail = "") {
  return std::string(collective) + " " + type.name + detail + " rank " +
         std::to_string(comm.rank()) + "/" + std::to_string(comm.world_size());
}

void CheckAllToAllV(ccl::Communicator& comm, const TestType& type, bool zero) {
  const int world = comm.world_size();
  const int me = comm.rank();
  std::vector<size_t> send_counts, recv_counts;
  for (int peer = 0; peer < world; ++peer) {
    send_counts.push_back(PairCount(me, peer, zero));
    recv_counts.push_back(PairCount(peer, me, zero));
  }
  // Sends packed with gaps in rank order, receives reversed with gaps.
  Layout send{send_counts, {}, 0};
  for (size_t count : send_counts) {
    send.displacements.push_back(send.extent);
    send.extent += count + 1;
  }
  const Layout recv = ReversedWithGaps(recv_counts);
  HostValues input = Filled(type, send.extent, kGapValue);
  for (int peer = 0; peer < world; ++peer) {
    for (size_t i = 0; i < send_counts[peer]; ++i) {
      input.Set(send.displacements[peer] + i, Moved(type, me, peer, i));
    }
  }
  HostValues want = Filled(type, recv.extent, kGapValue);
  for (int peer = 0; peer < world; ++peer) {
    for (size_t i = 0; i < recv_counts[peer]; ++i) {
      want.Set(recv.displacements[peer] + i, Moved(type, peer, me, i));
    }
  }
  DeviceBuffer send_buffer = Upload(comm, input);
  DeviceBuffer recv_buffer = Upload(comm, Filled(type, recv.extent, kGapValue));
  comm.AllToAllV(send_buffer.AsTensor(type.dtype, static_cast<int64_t>(send.extent)), send.counts,
                 send.displacements,
                 recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(recv.extent)), recv.counts,
                 recv.displacements);
  ExpectEach(
      type, Download(recv_buffer, type, recv.extent), [&](size_t i) { return want.Get(i); },
      Describe("all_to_all_v", type, comm, zero ? " zero counts" : ""));
}

void CheckAllGatherV(ccl::Communicator& comm, const TestType& type, bool zero, bool in_place) {
  const int world = comm.world_size();
  const int me = comm.rank();
  std::vector<size_t> counts;
  for (int peer = 0; peer < world; ++peer) counts.push_back(PairCount(peer, 0, zero));
  const Layout recv = ReversedWithGaps(counts);
  HostValues mine(type, counts[me]);
  for (size_t i = 0; i < counts[me]; ++i) mine.Set(i, Moved(type, me, 0, i));
  HostValues want = Filled(type, recv.extent, kGapValue);
  for (int peer = 0; peer < world; ++peer) {
    for (size_t i = 0; i < counts[peer]; ++i) {
      want.Set(recv.displacements[peer] + i, Moved(type, peer, 0, i));
    }
  }
  HostValues initial = Filled(type, recv.extent, kGapValue);
  // In place: this rank's input already sits at its block of the output.
  if (in_place) {
    for (size_t i = 0; i < counts[me]; ++i) initial.Set(recv.displacements[me] + i, mine.Get(i));
  }
  DeviceBuffer recv_buffer = Upload(comm, initial);
  DeviceBuffer send_buffer = Upload(comm, mine);
  const ccl::FlatTensor source =
      in_place ? recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(counts[me]),
                                      static_cast<int64_t>(recv.displacements[me]))
               : send_buffer.AsTensor(type.dtype, static_cast<int64_t>(counts[me]));
  comm.AllGatherV(source, recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(recv.extent)),
                  recv.counts, recv.displacements);
  ExpectEach(
      type, Download(recv_buffer, type, recv.extent), [&](size_t i) { return want.Get(i); },
      Describe("all_gather_v", type, comm,
               std::string(zero ? " zero counts" : "") + (in_place ? " in-place" : "")));
}

void CheckReduceScatterV(ccl::Communicator& comm, const TestType& type, ReduceOp op, bool zero) {
  const int world = comm.world_size();
  const int me = comm.rank();
  std::vector<size_t> counts;
  for (int peer = 0; peer < world; ++peer) counts.push_back(PairCount(peer, 1, zero));
  const Layout send = ReversedWithGaps(counts);
  // Element i of block p stands for global element p*100+i on every rank.
  HostValues input = Filled(type, send.extent, kGapValue);
  for (int peer = 0; peer < world; ++peer) {
    for (size_t i = 0; i < counts[peer]; ++i) {
      input.Set(send.displacements[peer] + i, InputValue(type, op, me, peer * 100 + i));
    }
  }
  DeviceBuffer send_buffer = Upload(comm, input);
  DeviceBuffer recv_buffer(comm.backend(), counts[me] * ccl::ElementBytes(type.dtype));
  comm.ReduceScatterV(send_buffer.AsTensor(type.dtype, static_cast<int64_t>(send.extent)),
                      send.counts, send.displacements,
                      recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(counts[me])), op);
  ExpectEach(
      type, Download(recv_buffer, type, counts[me]),
      [&](size_t i) { return ReferenceValue(type, op, world, me * 100 + i); },
      Describe("reduce_scatter_v", type, comm,
               " " + std::string(ccl::ReduceOpName(op)) + (zero ? " zero counts" : "")));
}

void CheckGather(ccl::Communicator& comm, const TestType& type, size_t count, int root) {
  const int world = comm.world_size();
  HostValues mine(type, count);
  for (size_t i = 0; i < count; ++i) mine.Set(i, Moved(type, comm.rank(), root, i));
  DeviceBuffer send_buffer = Upload(comm, mine);
  DeviceBuffer recv_buffer(comm.backend(), mine.bytes() * world);
  comm.Gather(send_buffer.AsTensor(type.dtype, static_cast<int64_t>(count)),
              recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(count * world)), root);
  if (comm.rank() != root) return;
  ExpectEach(
      type, Download(recv_buffer, type, count * world),
      [&](size_t j) { return Moved(type, static_cast<int>(j / count), root, j % count); },
      Describe("gather", type, comm,
               " count=" + std::to_string(count) + " root=" + std::to_string(root)));
}

void CheckScatter(ccl::Communicator& comm, const TestType& type, size_t count, int root) {
  const int world = comm.world_size();
  HostValues blocks(type, count * world);
  for (size_t j = 0; j < count * world; ++j) {
    blocks.Set(j, Moved(type, root, static_cast<int>(j / count), j % count));
  }
  DeviceBuffer send_buffer = Upload(comm, blocks);
  DeviceBuffer recv_buffer(comm.backend(), count * ccl::ElementBytes(type.dtype));
  comm.Scatter(send_buffer.AsTensor(type.dtype, static_cast<int64_t>(count * world)),
               recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(count)), root);
  ExpectEach(
      type, Download(recv_buffer, type, count),
      [&](size_t i) { return Moved(type, root, comm.rank(), i); },
      Describe("scatter", type, comm,
               " count=" + std::to_string(count) + " root=" + std::to_string(root)));
}

// Every case, in the same order on every rank.
void RunEveryVariableCollective(ccl::Communicator& comm) {
  for (bool zero : {false, true}) {
    for (const TestType& type : MovedTypes()) {
      CheckAllToAllV(comm, type, zero);
      CheckAllGatherV(comm, type, zero, false);
      CheckAllGatherV(comm, type, zero, true);
    }
    for (const TestType& type : AllTestTypes()) {
      for (ReduceOp op : AllReduceOps()) CheckReduceScatterV(comm, type, op, zero);
    }
  }
  for (const TestType& type : MovedTypes()) {
    for (size_t count : {0, 1, 7}) {
      for (int root : {0, comm.world_size() - 1}) {
        CheckGather(comm, type, count, root);
        CheckScatter(comm, type, count, root);
      }
    }
  }
  comm.Barrier();
}

class GlooVariableCollectives : public ::testing::TestWithParam<std::tuple<Launch, int>> {};

TEST_P(GlooVariableCollectives, EveryVariableCollectiveGatherAndScatterMatchHostValues) {
  const auto [launch, world_size] = GetParam();
  ccl::CommConfig config;
  config.timeout_ms = 60000;  // a broken collective fails instead of hanging the suite
  RunRanks(launch, world_size, RunEveryVariableCollective, config);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GlooVariableCollectives,
                         ::testing::Combine(::testing::Values(Launch::kThreads,
                                                              Launch::kThreadsOverBootstrap,
                                                              Launch::kProcesses),
                                            ::testing::Values(2, 3)),
                         [](const ::testing::TestParamInfo<std::tuple<Launch, int>>& param_info) {
                           return std::string(LaunchName(std::get<0>(param_info.param))) +
                                  "_world" + std::to_string(std::get<1>(param_info.param));
                         });

}  // namespace
}  // namespace infini::gloo_test
