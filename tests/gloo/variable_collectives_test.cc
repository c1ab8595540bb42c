// all_to_all_v, all_gather_v, reduce_scatter_v, gather and scatter of the
// gloo backend against the shared host reference: 2 and 3 ranks as threads,
// as threads meeting through a host bootstrap, and as processes; uneven
// counts with zeros, displacements that leave gaps and reverse the rank
// order, all-zero counts, and the one-byte types that are only moved (bool,
// fp8).
#include <gtest/gtest.h>

#include <algorithm>
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

// Types that collectives only move: one of each width, and the one-byte
// types the backend moves but never reduces.
const std::vector<DLDataType>& MovedTypes() {
  static const std::vector<DLDataType> types = {
      ccl::dtype::kInt8,
      ccl::dtype::kFloat16,
      ccl::dtype::kFloat32,
      ccl::dtype::kFloat64,
      DLDataType{INFINI_CCL_DL_BOOL, 8, 1},
      DLDataType{INFINI_CCL_DL_FLOAT8_E4M3FN, 8, 1},
  };
  return types;
}

// The reference's moved value rank `from` sends rank `to` at `index`: the
// block for each destination starts at its own stride, so blocks differ.
constexpr int64_t kBlockStride = 64;  // above every PairCount
double Moved(DLDataType dtype, int world, int from, int to, size_t index) {
  return reference::InputValue(dtype, std::nullopt, from, world,
                               to * kBlockStride + static_cast<int64_t>(index));
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

std::string Describe(const char* collective, DLDataType dtype, const ccl::Communicator& comm,
                     const std::string& detail = "") {
  return std::string(collective) + " " + ccl::DataTypeName(dtype) + detail + " rank " +
         std::to_string(comm.rank()) + "/" + std::to_string(comm.world_size());
}

void CheckAllToAllV(ccl::Communicator& comm, DLDataType dtype, bool zero) {
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
  std::vector<double> input(send.extent, kGapValue);
  for (int peer = 0; peer < world; ++peer) {
    for (size_t i = 0; i < send_counts[peer]; ++i) {
      input[send.displacements[peer] + i] = Moved(dtype, world, me, peer, i);
    }
  }
  std::vector<double> want(recv.extent, kGapValue);
  for (int peer = 0; peer < world; ++peer) {
    for (size_t i = 0; i < recv_counts[peer]; ++i) {
      want[recv.displacements[peer] + i] = Moved(dtype, world, peer, me, i);
    }
  }
  DeviceBuffer send_buffer = Upload(comm, dtype, input);
  DeviceBuffer recv_buffer = Upload(comm, dtype, std::vector<double>(recv.extent, kGapValue));
  comm.AllToAllV(send_buffer.AsTensor(dtype, static_cast<int64_t>(send.extent)), send.counts,
                 send.displacements, recv_buffer.AsTensor(dtype, static_cast<int64_t>(recv.extent)),
                 recv.counts, recv.displacements);
  ExpectMatches(dtype, std::nullopt, comm.world_size(), want,
                Download(recv_buffer, dtype, recv.extent),
                Describe("all_to_all_v", dtype, comm, zero ? " zero counts" : ""));
}

void CheckAllGatherV(ccl::Communicator& comm, DLDataType dtype, bool zero, bool in_place) {
  const int world = comm.world_size();
  const int me = comm.rank();
  std::vector<size_t> counts;
  for (int peer = 0; peer < world; ++peer) counts.push_back(PairCount(peer, 0, zero));
  const Layout recv = ReversedWithGaps(counts);
  const std::vector<double> mine =
      reference::InputValues(dtype, std::nullopt, me, world, 0, static_cast<int64_t>(counts[me]));
  std::vector<double> want(recv.extent, kGapValue);
  for (int peer = 0; peer < world; ++peer) {
    const std::vector<double> block = reference::InputValues(dtype, std::nullopt, peer, world, 0,
                                                             static_cast<int64_t>(counts[peer]));
    std::copy(block.begin(), block.end(), want.begin() + recv.displacements[peer]);
  }
  std::vector<double> initial(recv.extent, kGapValue);
  // In place: this rank's input already sits at its block of the output.
  if (in_place) std::copy(mine.begin(), mine.end(), initial.begin() + recv.displacements[me]);
  DeviceBuffer recv_buffer = Upload(comm, dtype, initial);
  DeviceBuffer send_buffer = Upload(comm, dtype, mine);
  const ccl::FlatTensor source =
      in_place ? recv_buffer.AsTensor(dtype, static_cast<int64_t>(counts[me]),
                                      static_cast<int64_t>(recv.displacements[me]))
               : send_buffer.AsTensor(dtype, static_cast<int64_t>(counts[me]));
  comm.AllGatherV(source, recv_buffer.AsTensor(dtype, static_cast<int64_t>(recv.extent)),
                  recv.counts, recv.displacements);
  ExpectMatches(dtype, std::nullopt, comm.world_size(), want,
                Download(recv_buffer, dtype, recv.extent),
                Describe("all_gather_v", dtype, comm,
                         std::string(zero ? " zero counts" : "") + (in_place ? " in-place" : "")));
}

void CheckReduceScatterV(ccl::Communicator& comm, DLDataType dtype, ReduceOp op, bool zero) {
  const int world = comm.world_size();
  const int me = comm.rank();
  std::vector<size_t> counts;
  for (int peer = 0; peer < world; ++peer) counts.push_back(PairCount(peer, 1, zero));
  const Layout send = ReversedWithGaps(counts);
  // Element i of block p stands for the reference's element p*100+i on every rank.
  std::vector<double> input(send.extent, kGapValue);
  for (int peer = 0; peer < world; ++peer) {
    for (size_t i = 0; i < counts[peer]; ++i) {
      input[send.displacements[peer] + i] =
          reference::InputValue(dtype, op, me, world, peer * 100 + static_cast<int64_t>(i));
    }
  }
  std::vector<double> want(counts[me]);
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = reference::ReducedValue(dtype, op, world, me * 100 + static_cast<int64_t>(i));
  }
  DeviceBuffer send_buffer = Upload(comm, dtype, input);
  DeviceBuffer recv_buffer(comm.backend(), counts[me] * ccl::ElementBytes(dtype));
  comm.ReduceScatterV(send_buffer.AsTensor(dtype, static_cast<int64_t>(send.extent)), send.counts,
                      send.displacements,
                      recv_buffer.AsTensor(dtype, static_cast<int64_t>(counts[me])), op);
  ExpectMatches(dtype, op, comm.world_size(), want, Download(recv_buffer, dtype, counts[me]),
                Describe("reduce_scatter_v", dtype, comm,
                         " " + std::string(ccl::ReduceOpName(op)) + (zero ? " zero counts" : "")));
}

void CheckGather(ccl::Communicator& comm, DLDataType dtype, size_t count, int root) {
  const int world = comm.world_size();
  const auto n = static_cast<int64_t>(count);
  DeviceBuffer send_buffer =
      Upload(comm, dtype, reference::InputValues(dtype, std::nullopt, comm.rank(), world, 0, n));
  DeviceBuffer recv_buffer(comm.backend(), send_buffer.bytes() * world);
  comm.Gather(send_buffer.AsTensor(dtype, n), recv_buffer.AsTensor(dtype, n * world), root);
  if (comm.rank() != root) return;
  ExpectMatches(dtype, std::nullopt, comm.world_size(), reference::ExpectAllGather(dtype, world, n),
                Download(recv_buffer, dtype, count * world),
                Describe("gather", dtype, comm,
                         " count=" + std::to_string(count) + " root=" + std::to_string(root)));
}

void CheckScatter(ccl::Communicator& comm, DLDataType dtype, size_t count, int root) {
  const int world = comm.world_size();
  const auto n = static_cast<int64_t>(count);
  // Every rank passes a send buffer; only the root's is read.
  DeviceBuffer send_buffer = Upload(
      comm, dtype, reference::InputValues(dtype, std::nullopt, comm.rank(), world, 0, n * world));
  DeviceBuffer recv_buffer(comm.backend(), count * ccl::ElementBytes(dtype));
  comm.Scatter(send_buffer.AsTensor(dtype, n * world), recv_buffer.AsTensor(dtype, n), root);
  ExpectMatches(dtype, std::nullopt, comm.world_size(),
                reference::ExpectScatter(dtype, world, root, comm.rank(), n),
                Download(recv_buffer, dtype, count),
                Describe("scatter", dtype, comm,
                         " count=" + std::to_string(count) + " root=" + std::to_string(root)));
}

// Every case, in the same order on every rank.
void RunEveryVariableCollective(ccl::Communicator& comm) {
  for (bool zero : {false, true}) {
    for (DLDataType dtype : MovedTypes()) {
      CheckAllToAllV(comm, dtype, zero);
      CheckAllGatherV(comm, dtype, zero, false);
      CheckAllGatherV(comm, dtype, zero, true);
    }
    for (DLDataType dtype : ReducibleTypes()) {
      for (ReduceOp op : reference::AllReduceOps()) CheckReduceScatterV(comm, dtype, op, zero);
    }
  }
  for (DLDataType dtype : MovedTypes()) {
    for (size_t count : {0, 1, 7}) {
      for (int root : {0, comm.world_size() - 1}) {
        CheckGather(comm, dtype, count, root);
        CheckScatter(comm, dtype, count, root);
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
