#include "scenarios.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "infini/ccl/plugin_table.h"
#include "infini/conformance/reference.h"

namespace infini::ccl::nccl_test {
namespace {

namespace reference = infini::conformance;
using reference::Purpose;

// One collective call to check.
struct Case {
  Collective collective;
  DLDataType dtype;
  ReduceOp op;
  size_t count;  // per-rank block: see SendCount/RecvCount
  bool in_place;
  int root;
};

// Built with append: GCC 12 at -O3 reports a false -Wrestrict on the
// equivalent chain of operator+.
std::string Describe(const Case& c) {
  std::string text(CollectiveName(c.collective));
  text.append(" ").append(DataTypeName(c.dtype));
  if (IsReduction(c.collective)) text.append(" ").append(ReduceOpName(c.op));
  text.append(" count=").append(std::to_string(c.count));
  text.append(c.in_place ? " in-place" : " out-of-place");
  return text;
}

size_t SendCount(const Case& c, int world_size) {
  switch (c.collective) {
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return c.count * static_cast<size_t>(world_size);
    default:
      return c.count;
  }
}

size_t RecvCount(const Case& c, int world_size) {
  switch (c.collective) {
    case Collective::kAllGather:
    case Collective::kAllToAll:
      return c.count * static_cast<size_t>(world_size);
    default:
      return c.count;
  }
}

// What the case's inputs are for: its operator, or moved data.
Purpose PurposeOf(const Case& c) {
  return IsReduction(c.collective) ? Purpose{c.op} : std::nullopt;
}

// Expected element `index` of `rank`'s receive buffer, from the shared host
// reference; false when NCCL leaves it unspecified (reduce on a non-root rank).
bool Expected(const Case& c, int rank, int world_size, size_t index, double* value) {
  const auto block = static_cast<int64_t>(c.count);
  const auto element = static_cast<int64_t>(index);
  switch (c.collective) {
    case Collective::kAllReduce:
      *value = reference::ReducedValue(c.dtype, c.op, world_size, element);
      return true;
    case Collective::kReduce:
      *value = reference::ReducedValue(c.dtype, c.op, world_size, element);
      return rank == c.root;
    case Collective::kBroadcast:
      *value = reference::InputValue(c.dtype, std::nullopt, c.root, world_size, element);
      return true;
    case Collective::kAllGather:
      *value = reference::InputValue(c.dtype, std::nullopt, static_cast<int>(element / block),
                                     world_size, element % block);
      return true;
    case Collective::kReduceScatter:
      *value = reference::ReducedValue(c.dtype, c.op, world_size, rank * block + element);
      return true;
    case Collective::kAllToAll:
      *value = reference::InputValue(c.dtype, std::nullopt, static_cast<int>(element / block),
                                     world_size, rank * block + element % block);
      return true;
    default:  // the scenarios issue only the six above
      break;
  }
  return false;
}

// Device buffers reused by every case of a scenario.
struct Buffers {
  DeviceBuffer send;
  DeviceBuffer recv;
};

void Issue(const Case& c, RankContext& context, const Buffers& buffers) {
  const Communicator& comm = *context.comm;
  const Stream& stream = *context.stream;
  const DLDataType dtype = c.dtype;
  const auto world = static_cast<int64_t>(context.world_size);
  const auto count = static_cast<int64_t>(c.count);
  const auto rank = static_cast<int64_t>(context.rank);
  const DeviceBuffer& source = c.in_place ? buffers.recv : buffers.send;
  switch (c.collective) {
    case Collective::kAllReduce:
      comm.AllReduce(source.AsTensor(dtype, count), buffers.recv.AsTensor(dtype, count), c.op,
                     stream);
      break;
    case Collective::kBroadcast:
      comm.Broadcast(source.AsTensor(dtype, count), buffers.recv.AsTensor(dtype, count), c.root,
                     stream);
      break;
    case Collective::kReduce:
      comm.Reduce(source.AsTensor(dtype, count), buffers.recv.AsTensor(dtype, count), c.op, c.root,
                  stream);
      break;
    case Collective::kAllGather:
      // In place: this rank's block already sits at its place in recv.
      comm.AllGather(
          c.in_place ? source.AsTensor(dtype, count, rank * count) : source.AsTensor(dtype, count),
          buffers.recv.AsTensor(dtype, world * count), stream);
      break;
    case Collective::kReduceScatter:
      // In place: the result lands at this rank's block of the input.
      comm.ReduceScatter(source.AsTensor(dtype, world * count),
                         c.in_place ? buffers.recv.AsTensor(dtype, count, rank * count)
                                    : buffers.recv.AsTensor(dtype, count),
                         c.op, stream);
      break;
    case Collective::kAllToAll:
      comm.AllToAll(source.AsTensor(dtype, world * count),
                    buffers.recv.AsTensor(dtype, world * count), stream);
      break;
    default:
      throw std::logic_error("nccl scenarios: no case issues " +
                             std::string(CollectiveName(c.collective)));
  }
}

// Where the result starts in recv, in elements.
size_t ResultOffset(const Case& c, int rank) {
  return c.in_place && c.collective == Collective::kReduceScatter
             ? static_cast<size_t>(rank) * c.count
             : 0;
}

// Where this rank's input goes in the buffer it is read from, in elements.
size_t InputOffset(const Case& c, int rank) {
  return c.in_place && c.collective == Collective::kAllGather ? static_cast<size_t>(rank) * c.count
                                                              : 0;
}

void Check(const Case& c, RankContext& context, const Buffers& buffers) {
  const int rank = context.rank;
  const int world = context.world_size;
  const size_t width = ElementBytes(c.dtype);
  const std::string what = Describe(c);
  const Purpose purpose = PurposeOf(c);

  const std::vector<unsigned char> input =
      reference::Encode(c.dtype, reference::InputValues(c.dtype, purpose, rank, world, 0,
                                                        static_cast<int64_t>(SendCount(c, world))));
  const size_t recv_count = RecvCount(c, world);
  const size_t recv_span = std::max(recv_count, SendCount(c, world)) * width;
  std::vector<unsigned char> sentinel(recv_span, 0xA5);
  if (recv_span > 0) buffers.recv.CopyFromHost(sentinel.data(), recv_span);
  if (!input.empty()) {
    const DeviceBuffer& target = c.in_place ? buffers.recv : buffers.send;
    target.CopyFromHost(input.data(), input.size(), InputOffset(c, rank) * width);
  }

  Issue(c, context, buffers);
  context.Wait(what);

  std::vector<unsigned char> output(recv_count * width);
  if (!output.empty()) {
    buffers.recv.CopyToHost(output.data(), output.size(), ResultOffset(c, rank) * width);
  }
  for (size_t index = 0; index < recv_count; ++index) {
    double expected = 0;
    if (!Expected(c, rank, world, index, &expected)) return;
    const double actual = reference::DecodeElement(c.dtype, output.data() + index * width);
    if (!reference::CloseEnough(c.dtype, purpose, world, actual, expected)) {
      context.Expect(false, what + ": element " + std::to_string(index) + " is " +
                                std::to_string(actual) + ", expected " + std::to_string(expected));
      return;
    }
  }
}

Buffers MakeBuffers(const RankContext& context, size_t max_count) {
  const size_t bytes = max_count * static_cast<size_t>(context.world_size) * sizeof(double);
  return Buffers{DeviceBuffer(context.backend, bytes), DeviceBuffer(context.backend, bytes)};
}

constexpr size_t kCounts[] = {0, 1, 1001};

bool IsBool(DLDataType dtype) { return dtype.code == INFINI_CCL_DL_BOOL; }

// Every type of the C++ API: NCCL's twelve, bool (moved as bytes, reduced as
// uint8), and int16 and uint16 (moved as bytes, never reduced).
std::vector<DLDataType> MatrixTypes() { return reference::AllDataTypes(); }

bool IsMoveOnly(DLDataType dtype) {
  return dtype.bits == 16 && (dtype.code == kDLInt || dtype.code == kDLUInt);
}

// What the plugin reduces each type with (bool: max and min only).
std::vector<ReduceOp> OpsFor(DLDataType dtype) {
  if (IsBool(dtype)) return {ReduceOp::kMax, ReduceOp::kMin};
  if (IsMoveOnly(dtype)) return {};
  return reference::AllReduceOps();
}

}  // namespace

void CollectivesMatchHostReference(RankContext& context) {
  const Buffers buffers = MakeBuffers(context, 1001);
  const int root = context.world_size - 1;  // a non-zero root catches more
  for (Collective collective :
       {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce, Collective::kAllGather,
        Collective::kReduceScatter, Collective::kAllToAll}) {
    for (DLDataType dtype : MatrixTypes()) {
      const std::vector<ReduceOp> ops =
          IsReduction(collective) ? OpsFor(dtype) : std::vector<ReduceOp>{ReduceOp::kSum};
      for (ReduceOp op : ops) {
        for (size_t count : kCounts) {
          for (bool in_place : {false, true}) {
            // all_to_all has no in-place form in NCCL (blocks would be
            // overwritten before they are sent).
            if (in_place && collective == Collective::kAllToAll) continue;
            Check(Case{collective, dtype, op, count, in_place, root}, context, buffers);
          }
        }
      }
    }
  }
}

void GroupedCollectivesMatchHostReference(RankContext& context) {
  const Backend& backend = *context.backend;
  const DLDataType f32 = dtype::kFloat32;
  const DLDataType i32 = dtype::kInt32;
  const int64_t count = 257;
  const int world = context.world_size;
  const size_t bytes = static_cast<size_t>(count) * 4;
  DeviceBuffer reduce_in(context.backend, bytes), reduce_out(context.backend, bytes);
  DeviceBuffer gather_in(context.backend, bytes),
      gather_out(context.backend, bytes * static_cast<size_t>(world));
  DeviceBuffer bcast(context.backend, bytes);
  const std::vector<unsigned char> reduce_input = reference::Encode(
      f32, reference::InputValues(f32, ReduceOp::kSum, context.rank, world, 0, count));
  const std::vector<unsigned char> gather_input = reference::Encode(
      i32, reference::InputValues(i32, std::nullopt, context.rank, world, 0, count));
  // Only the root's data is sent: the others start from zeros.
  const std::vector<unsigned char> bcast_input =
      context.rank == 0
          ? reference::Encode(f32, reference::InputValues(f32, std::nullopt, 0, world, 0, count))
          : std::vector<unsigned char>(bytes, 0);
  reduce_in.CopyFromHost(reduce_input.data(), bytes);
  gather_in.CopyFromHost(gather_input.data(), bytes);
  bcast.CopyFromHost(bcast_input.data(), bytes);

  backend.GroupStart();
  context.comm->AllReduce(reduce_in.AsTensor(f32, count), reduce_out.AsTensor(f32, count),
                          ReduceOp::kSum, *context.stream);
  context.comm->AllGather(gather_in.AsTensor(i32, count), gather_out.AsTensor(i32, count * world),
                          *context.stream);
  context.comm->Broadcast(bcast.AsTensor(f32, count), bcast.AsTensor(f32, count), 0,
                          *context.stream);
  backend.GroupEnd();
  context.Wait("grouped all_reduce + all_gather + broadcast");

  // Small integers: every result is exact, so compared exactly.
  const auto exactly = [&](const std::string& what, DLDataType dtype, const DeviceBuffer& buffer,
                           const std::vector<double>& expected) {
    std::vector<unsigned char> host(buffer.bytes());
    buffer.CopyToHost(host.data(), host.size());
    const reference::Comparison comparison =
        reference::Compare(dtype, std::nullopt, world, expected,
                           reference::Decode(dtype, host.data(), expected.size()));
    context.Expect(comparison.ok(), what + ": " + comparison.Describe());
  };
  exactly("grouped all_reduce", f32, reduce_out,
          reference::ExpectAllReduce(f32, ReduceOp::kSum, world, count));
  exactly("grouped broadcast", f32, bcast, reference::ExpectBroadcast(f32, world, 0, count));
  exactly("grouped all_gather", i32, gather_out, reference::ExpectAllGather(i32, world, count));
}

namespace {

// Sends `count` elements of `dtype` to `to` and receives from `from`; both
// inside one group when `grouped`, else ordered so that pairs cannot wait on
// each other (the lower rank sends first).
void Exchange(RankContext& context, DLDataType dtype, size_t count, int to, int from,
              bool grouped) {
  const Backend& backend = *context.backend;
  const size_t width = ElementBytes(dtype);
  const auto n = static_cast<int64_t>(count);
  DeviceBuffer out(context.backend, count * width), in(context.backend, count * width);
  const std::vector<unsigned char> input = reference::Encode(
      dtype, reference::InputValues(dtype, std::nullopt, context.rank, context.world_size, 0, n));
  if (!input.empty()) out.CopyFromHost(input.data(), input.size());
  const std::string what = std::string(grouped ? "grouped" : "ungrouped") + " send/recv " +
                           DataTypeName(dtype) + " count=" + std::to_string(count);
  if (grouped) {
    backend.GroupStart();
    context.comm->Send(out.AsTensor(dtype, n), to, *context.stream);
    context.comm->Recv(in.AsTensor(dtype, n), from, *context.stream);
    backend.GroupEnd();
  } else if (context.rank < to) {
    context.comm->Send(out.AsTensor(dtype, n), to, *context.stream);
    context.comm->Recv(in.AsTensor(dtype, n), from, *context.stream);
  } else {
    context.comm->Recv(in.AsTensor(dtype, n), from, *context.stream);
    context.comm->Send(out.AsTensor(dtype, n), to, *context.stream);
  }
  context.Wait(what);
  std::vector<unsigned char> received(count * width);
  if (!received.empty()) in.CopyToHost(received.data(), received.size());
  const reference::Comparison comparison =
      reference::Compare(dtype, std::nullopt, context.world_size,
                         reference::ExpectReceived(dtype, context.world_size, from, n),
                         reference::Decode(dtype, received.data(), count));
  context.Expect(comparison.ok(),
                 what + " from rank " + std::to_string(from) + ": " + comparison.Describe());
}

std::vector<DLDataType> P2pTypes() {
  // float32, bfloat16, int8, float64, fp8 e4m3, and bool (moved as bytes).
  return {dtype::kFloat32,
          dtype::kBFloat16,
          dtype::kInt8,
          dtype::kFloat64,
          DLDataType{INFINI_CCL_DL_FLOAT8_E4M3FN, 8, 1},
          DLDataType{INFINI_CCL_DL_BOOL, 8, 1}};
}

}  // namespace

void P2pRingDeliversNeighbourData(RankContext& context) {
  const int world = context.world_size;
  const int next = (context.rank + 1) % world;
  const int previous = (context.rank + world - 1) % world;
  for (DLDataType dtype : P2pTypes()) {
    for (size_t count : kCounts) Exchange(context, dtype, count, next, previous, true);
  }
}

void P2pPairsExchangeOutsideGroups(RankContext& context) {
  const int partner = context.rank ^ 1;
  if (partner >= context.world_size) return;  // odd world: the last rank sits out
  for (DLDataType dtype : P2pTypes()) Exchange(context, dtype, 1001, partner, partner, false);
}

namespace {

// all_gather of each member's old rank over `comm`.
std::vector<double> GatherOldRanks(RankContext& context, const Communicator& comm) {
  const DLDataType f32 = dtype::kFloat32;
  const auto members = static_cast<size_t>(comm.world_size());
  DeviceBuffer mine(context.backend, 4), all(context.backend, 4 * members);
  const auto value = static_cast<float>(context.rank);
  mine.CopyFromHost(&value, sizeof(value));
  comm.AllGather(mine.AsTensor(f32, 1), all.AsTensor(f32, static_cast<int64_t>(members)),
                 *context.stream);
  context.Wait("all_gather on a split communicator");
  std::vector<float> gathered(members);
  all.CopyToHost(gathered.data(), gathered.size() * sizeof(float));
  return std::vector<double>(gathered.begin(), gathered.end());
}

}  // namespace

void SplitCommunicatorsHaveExpectedMembers(RankContext& context) {
  const int rank = context.rank;
  const int world = context.world_size;
  const Communicator& parent = *context.comm;

  // One color, keys reversed: new rank = world - 1 - old rank.
  {
    Communicator reversed = parent.Split(0, world - 1 - rank);
    context.Expect(reversed.valid(), "split(color 0): communicator is not valid");
    if (!reversed.valid()) return;
    context.Expect(reversed.rank() == world - 1 - rank,
                   "reversed split: rank " + std::to_string(reversed.rank()));
    context.Expect(reversed.world_size() == world,
                   "reversed split: world size " + std::to_string(reversed.world_size()));
    const std::vector<double> old_ranks = GatherOldRanks(context, reversed);
    for (size_t index = 0; index < old_ranks.size(); ++index) {
      context.Expect(old_ranks[index] == world - 1 - static_cast<int>(index),
                     "reversed split: member " + std::to_string(index) + " was old rank " +
                         std::to_string(old_ranks[index]));
    }
    reversed.Destroy();
  }
  // Even and odd ranks apart, ordered by old rank.
  {
    Communicator parity = parent.Split(rank % 2, rank);
    const int members = (world - rank % 2 + 1) / 2;
    context.Expect(parity.rank() == rank / 2,
                   "parity split: rank " + std::to_string(parity.rank()));
    context.Expect(parity.world_size() == members,
                   "parity split: world size " + std::to_string(parity.world_size()));
    const std::vector<double> old_ranks = GatherOldRanks(context, parity);
    for (size_t index = 0; index < old_ranks.size(); ++index) {
      context.Expect(
          old_ranks[index] == static_cast<double>(rank % 2 + 2 * static_cast<int>(index)),
          "parity split: member " + std::to_string(index) + " was old rank " +
              std::to_string(old_ranks[index]));
    }
    parity.Destroy();
  }
  // Rank 0 opts out (color < 0) and gets no communicator.
  {
    Communicator rest = parent.Split(rank == 0 ? -1 : 1, rank);
    if (rank == 0) {
      context.Expect(!rest.valid(), "split(color -1) gave rank 0 a communicator");
    } else {
      context.Expect(rest.valid() && rest.rank() == rank - 1 && rest.world_size() == world - 1,
                     "split without rank 0: rank " + std::to_string(rest.rank()) + " of " +
                         std::to_string(rest.world_size()));
      if (rest.valid()) GatherOldRanks(context, rest);
      rest.Destroy();
    }
  }
}

void BarrierCompletes(RankContext& context) {
  for (int round = 0; round < 3; ++round) {
    context.comm->Barrier(*context.stream);
    context.Wait("barrier");
  }
}

void GraphReplayedAllReduceMatchesHostReference(RankContext& context) {
  const auto& plugin = PluginTable(*context.backend);
  const DLDataType f32 = dtype::kFloat32;
  const size_t count = 64;
  const int replays = 3;
  DeviceBuffer buffer(context.backend, count * 4);
  const std::vector<float> ones(count, 1.0f);
  // NCCL connects peers lazily, at a communicator's first collective, and
  // connecting is not allowed while a stream is capturing: run one eagerly.
  context.comm->AllReduce(buffer.AsTensor(f32, count), buffer.AsTensor(f32, count), ReduceOp::kSum,
                          *context.stream);
  context.Wait("eager all_reduce before capture");
  buffer.CopyFromHost(ones.data(), count * sizeof(float));

  infiniCclStream_t stream = context.stream->handle();
  context.backend->Check(plugin.stream_begin_capture(stream), "stream_begin_capture");
  context.comm->AllReduce(buffer.AsTensor(f32, count), buffer.AsTensor(f32, count), ReduceOp::kSum,
                          *context.stream);
  infiniCclGraph_t graph = nullptr;
  context.backend->Check(plugin.stream_end_capture(stream, &graph), "stream_end_capture");
  context.Wait("capture");  // capturing ran nothing: the buffer still holds ones
  std::vector<float> after_capture(count);
  buffer.CopyToHost(after_capture.data(), count * sizeof(float));
  context.Expect(after_capture[0] == 1.0f, "capturing an all_reduce ran it");

  for (int replay = 0; replay < replays; ++replay) {
    context.backend->Check(plugin.graph_launch(graph, stream), "graph_launch");
  }
  context.Wait("graph replays");
  context.backend->Check(plugin.graph_destroy(graph), "graph_destroy");
  std::vector<float> result(count);
  buffer.CopyToHost(result.data(), count * sizeof(float));
  const double expected = std::pow(context.world_size, replays);
  for (size_t index = 0; index < count; ++index) {
    if (result[index] != expected) {
      context.Expect(false, "graph-replayed all_reduce: element " + std::to_string(index) + " is " +
                                std::to_string(result[index]) + ", expected " +
                                std::to_string(expected));
      return;
    }
  }
}

void LargeAllReduceMatchesHostReference(RankContext& context) {
  constexpr size_t kBytes = size_t{256} << 20;
  constexpr size_t kCount = kBytes / sizeof(float);
  const DLDataType f32 = dtype::kFloat32;
  std::vector<float> host(kCount);
  for (size_t index = 0; index < kCount; ++index) {
    host[index] = static_cast<float>(index % 13 + static_cast<size_t>(context.rank));
  }
  DeviceBuffer send(context.backend, kBytes), recv(context.backend, kBytes);
  send.CopyFromHost(host.data(), kBytes);
  context.comm->AllReduce(send.AsTensor(f32, kCount), recv.AsTensor(f32, kCount), ReduceOp::kSum,
                          *context.stream);
  context.Wait("256 MiB all_reduce");
  recv.CopyToHost(host.data(), kBytes);
  const auto world = static_cast<size_t>(context.world_size);
  const size_t rank_sum = world * (world - 1) / 2;
  for (size_t index = 0; index < kCount; ++index) {
    const auto expected = static_cast<float>(world * (index % 13) + rank_sum);
    if (host[index] != expected) {
      context.Expect(false, "256 MiB all_reduce: element " + std::to_string(index) + " is " +
                                std::to_string(host[index]) + ", expected " +
                                std::to_string(expected));
      return;
    }
  }
}

namespace {

constexpr unsigned char kSentinel = 0xA5;

// Blocks of a v-collective's buffer: block p holds counts[p] elements at
// displacements[p]; `gap` untouched elements separate consecutive blocks, so
// that a block written past its end is caught.
struct Blocks {
  std::vector<size_t> counts;
  std::vector<size_t> displacements;
  size_t span = 0;  // elements the buffer needs
};

Blocks MakeBlocks(int world, size_t gap, const std::function<size_t(int)>& count_of) {
  Blocks blocks;
  for (int p = 0; p < world; ++p) {
    blocks.displacements.push_back(blocks.span);
    blocks.counts.push_back(count_of(p));
    blocks.span += blocks.counts.back() + gap;
  }
  return blocks;
}

// A device buffer of `count` elements of `dtype`, filled with `fill` (host
// values, or sentinel bytes where fill is empty).
DeviceBuffer Upload(const RankContext& context, DLDataType dtype, size_t count,
                    const std::function<double(size_t)>& fill) {
  const size_t width = ElementBytes(dtype);
  const size_t bytes = std::max<size_t>(count * width, 8);
  DeviceBuffer buffer(context.backend, bytes);
  std::vector<unsigned char> host(bytes, kSentinel);
  if (fill) {
    for (size_t index = 0; index < count; ++index) {
      reference::EncodeElement(dtype, fill(index), host.data() + index * width);
    }
  }
  buffer.CopyFromHost(host.data(), bytes);
  return buffer;
}

std::vector<unsigned char> Download(const DeviceBuffer& buffer) {
  std::vector<unsigned char> host(buffer.bytes());
  buffer.CopyToHost(host.data(), host.size());
  return host;
}

// Elements [offset, offset + count) of `bytes` against `expected`, within
// the reference's tolerance for `purpose` (exact for moved data); false
// (with one failure recorded) at the first difference.
bool ExpectBlock(RankContext& context, const std::string& what, DLDataType dtype, Purpose purpose,
                 const std::vector<unsigned char>& bytes, size_t offset, size_t count,
                 const std::function<double(size_t)>& expected) {
  const size_t width = ElementBytes(dtype);
  for (size_t index = 0; index < count; ++index) {
    const double actual = reference::DecodeElement(dtype, bytes.data() + (offset + index) * width);
    if (!reference::CloseEnough(dtype, purpose, context.world_size, actual, expected(index))) {
      context.Expect(false, what + ": element " + std::to_string(index) + " of the block at " +
                                std::to_string(offset) + " is " + std::to_string(actual) +
                                ", expected " + std::to_string(expected(index)));
      return false;
    }
  }
  return true;
}

// Elements [from, to) still hold the sentinel.
bool ExpectUntouched(RankContext& context, const std::string& what, DLDataType dtype,
                     const std::vector<unsigned char>& bytes, size_t from, size_t to) {
  const size_t width = ElementBytes(dtype);
  for (size_t byte = from * width; byte < to * width; ++byte) {
    if (bytes[byte] != kSentinel) {
      context.Expect(false, what + ": element " + std::to_string(byte / width) +
                                " between blocks was written");
      return false;
    }
  }
  return true;
}

std::vector<DLDataType> VariableMovementTypes() {
  // float32, bfloat16, int8, fp8 e5m2, and bool (moved as bytes).
  return {dtype::kFloat32, dtype::kBFloat16, dtype::kInt8,
          DLDataType{INFINI_CCL_DL_FLOAT8_E5M2, 8, 1}, DLDataType{INFINI_CCL_DL_BOOL, 8, 1}};
}

// Element `index` of rank `from`'s moved data (the shared reference's).
double MovedValue(DLDataType dtype, int world, int from, size_t index) {
  return reference::InputValue(dtype, std::nullopt, from, world, static_cast<int64_t>(index));
}

// Element `index` of the block rank `from` sends to rank `to`.
double PairValue(DLDataType dtype, int world, int from, int to, size_t index) {
  return MovedValue(dtype, world, from, static_cast<size_t>(to) * 64 + index);
}

// Uneven, some empty: rank p sends ((3p + q) mod 4) x 17 elements to rank q.
size_t PairCount(int from, int to) { return static_cast<size_t>((3 * from + to) % 4) * 17; }

void CheckAllToAllV(RankContext& context, DLDataType dtype) {
  const int rank = context.rank;
  const int world = context.world_size;
  const std::string what = "all_to_all_v " + DataTypeName(dtype);
  const Blocks send = MakeBlocks(world, 2, [&](int to) { return PairCount(rank, to); });
  const Blocks recv = MakeBlocks(world, 1, [&](int from) { return PairCount(from, rank); });
  std::vector<double> send_values(send.span, 0.0);
  for (int to = 0; to < world; ++to) {
    for (size_t index = 0; index < send.counts[to]; ++index) {
      send_values[send.displacements[to] + index] = PairValue(dtype, world, rank, to, index);
    }
  }
  const DeviceBuffer send_buffer =
      Upload(context, dtype, send.span, [&](size_t index) { return send_values[index]; });
  const DeviceBuffer recv_buffer = Upload(context, dtype, recv.span, {});
  context.comm->AllToAllV(send_buffer.AsTensor(dtype, static_cast<int64_t>(send.span)), send.counts,
                          send.displacements,
                          recv_buffer.AsTensor(dtype, static_cast<int64_t>(recv.span)), recv.counts,
                          recv.displacements, *context.stream);
  context.Wait(what);
  const std::vector<unsigned char> bytes = Download(recv_buffer);
  for (int from = 0; from < world; ++from) {
    const size_t start = recv.displacements[from];
    if (!ExpectBlock(context, what + " from rank " + std::to_string(from), dtype, std::nullopt,
                     bytes, start, recv.counts[from],
                     [&](size_t index) { return PairValue(dtype, world, from, rank, index); }) ||
        !ExpectUntouched(context, what, dtype, bytes, start + recv.counts[from],
                         start + recv.counts[from] + 1)) {
      return;
    }
  }
}

// Rank p contributes (p mod 3) x 19 elements: rank 0 none.
size_t GatherVCount(int rank) { return static_cast<size_t>(rank % 3) * 19; }

void CheckAllGatherV(RankContext& context, DLDataType dtype, bool in_place) {
  const int rank = context.rank;
  const int world = context.world_size;
  const std::string what =
      "all_gather_v " + DataTypeName(dtype) + (in_place ? " in-place" : " out-of-place");
  const Blocks recv = MakeBlocks(world, 1, GatherVCount);
  const size_t mine = recv.counts[rank];
  const auto own_value = [&](size_t index) { return MovedValue(dtype, world, rank, index); };
  // In place, this rank's block already sits at its place in recv.
  const DeviceBuffer recv_buffer =
      Upload(context, dtype, recv.span,
             in_place ? std::function<double(size_t)>([&](size_t index) {
               const size_t start = recv.displacements[rank];
               return index >= start && index < start + mine ? own_value(index - start)
                                                             : static_cast<double>(kSentinel);
             })
                      : std::function<double(size_t)>());
  const DeviceBuffer send_buffer = Upload(context, dtype, mine, own_value);
  const auto recv_tensor = recv_buffer.AsTensor(dtype, static_cast<int64_t>(recv.span));
  const auto send_tensor =
      in_place ? recv_buffer.AsTensor(dtype, static_cast<int64_t>(mine),
                                      static_cast<int64_t>(recv.displacements[rank]))
               : send_buffer.AsTensor(dtype, static_cast<int64_t>(mine));
  context.comm->AllGatherV(send_tensor, recv_tensor, recv.counts, recv.displacements,
                           *context.stream);
  context.Wait(what);
  const std::vector<unsigned char> bytes = Download(recv_buffer);
  for (int from = 0; from < world; ++from) {
    const size_t start = recv.displacements[from];
    if (!ExpectBlock(context, what + " from rank " + std::to_string(from), dtype, std::nullopt,
                     bytes, start, recv.counts[from],
                     [&](size_t index) { return MovedValue(dtype, world, from, index); })) {
      return;
    }
    // In place, the gap bytes were encoded from the sentinel value, not raw.
    if (!in_place && !ExpectUntouched(context, what, dtype, bytes, start + recv.counts[from],
                                      start + recv.counts[from] + 1)) {
      return;
    }
  }
}

// Rank q receives (((q + 1) mod 3) x 23) reduced elements: rank 2 none.
size_t ScatterVCount(int rank) { return static_cast<size_t>((rank + 1) % 3) * 23; }

void CheckReduceScatterV(RankContext& context, DLDataType dtype, ReduceOp op, bool in_place) {
  const int rank = context.rank;
  const int world = context.world_size;
  const std::string what = "reduce_scatter_v " + DataTypeName(dtype) + " " +
                           std::string(ReduceOpName(op)) + (in_place ? " in-place" : "");
  const Blocks send = MakeBlocks(world, 1, ScatterVCount);
  // Element i of block q is element q*64 + i of the reference's input.
  std::vector<double> send_values(send.span, 0.0);
  for (int to = 0; to < world; ++to) {
    for (size_t index = 0; index < send.counts[to]; ++index) {
      send_values[send.displacements[to] + index] = reference::InputValue(
          dtype, op, rank, world, to * int64_t{64} + static_cast<int64_t>(index));
    }
  }
  const DeviceBuffer send_buffer =
      Upload(context, dtype, send.span, [&](size_t index) { return send_values[index]; });
  const size_t mine = send.counts[rank];
  const DeviceBuffer recv_buffer = Upload(context, dtype, mine, {});
  const auto recv_tensor =
      in_place ? send_buffer.AsTensor(dtype, static_cast<int64_t>(mine),
                                      static_cast<int64_t>(send.displacements[rank]))
               : recv_buffer.AsTensor(dtype, static_cast<int64_t>(mine));
  context.comm->ReduceScatterV(send_buffer.AsTensor(dtype, static_cast<int64_t>(send.span)),
                               send.counts, send.displacements, recv_tensor, op, *context.stream);
  context.Wait(what);
  const std::vector<unsigned char> bytes = Download(in_place ? send_buffer : recv_buffer);
  ExpectBlock(context, what, dtype, op, bytes, in_place ? send.displacements[rank] : 0, mine,
              [&](size_t index) {
                return reference::ReducedValue(dtype, op, world,
                                               rank * int64_t{64} + static_cast<int64_t>(index));
              });
}

void CheckGather(RankContext& context, DLDataType dtype, size_t count, bool in_place) {
  const int rank = context.rank;
  const int world = context.world_size;
  const int root = world - 1;
  const std::string what = "gather " + DataTypeName(dtype) + " count=" + std::to_string(count) +
                           (in_place ? " in-place" : "");
  const auto value_of = [dtype, world](int from) {
    return [dtype, world, from](size_t index) { return MovedValue(dtype, world, from, index); };
  };
  const size_t total = count * static_cast<size_t>(world);
  const bool root_in_place = in_place && rank == root;
  const DeviceBuffer recv_buffer =
      Upload(context, dtype, total,
             root_in_place ? std::function<double(size_t)>([&](size_t index) {
               return index / std::max<size_t>(count, 1) == static_cast<size_t>(root)
                          ? value_of(root)(index % count)
                          : static_cast<double>(kSentinel);
             })
                           : std::function<double(size_t)>());
  const DeviceBuffer send_buffer = Upload(context, dtype, count, value_of(rank));
  const auto send_tensor = root_in_place ? recv_buffer.AsTensor(dtype, static_cast<int64_t>(count),
                                                                static_cast<int64_t>(count) * root)
                                         : send_buffer.AsTensor(dtype, static_cast<int64_t>(count));
  context.comm->Gather(send_tensor, recv_buffer.AsTensor(dtype, static_cast<int64_t>(total)), root,
                       *context.stream);
  context.Wait(what);
  if (rank != root) return;  // recv matters on the root only
  const std::vector<unsigned char> bytes = Download(recv_buffer);
  for (int from = 0; from < world; ++from) {
    if (!ExpectBlock(context, what + " from rank " + std::to_string(from), dtype, std::nullopt,
                     bytes, static_cast<size_t>(from) * count, count, value_of(from))) {
      return;
    }
  }
}

void CheckScatter(RankContext& context, DLDataType dtype, size_t count, bool in_place) {
  const int rank = context.rank;
  const int world = context.world_size;
  const int root = world - 1;
  const std::string what = "scatter " + DataTypeName(dtype) + " count=" + std::to_string(count) +
                           (in_place ? " in-place" : "");
  const size_t total = count * static_cast<size_t>(world);
  // The root's block for rank r holds element r*count + i of its input.
  const DeviceBuffer send_buffer = Upload(
      context, dtype, total, [&](size_t index) { return MovedValue(dtype, world, root, index); });
  const DeviceBuffer recv_buffer = Upload(context, dtype, count, {});
  const bool root_in_place = in_place && rank == root;
  const auto recv_tensor = root_in_place ? send_buffer.AsTensor(dtype, static_cast<int64_t>(count),
                                                                static_cast<int64_t>(count) * root)
                                         : recv_buffer.AsTensor(dtype, static_cast<int64_t>(count));
  context.comm->Scatter(send_buffer.AsTensor(dtype, static_cast<int64_t>(total)), recv_tensor, root,
                        *context.stream);
  context.Wait(what);
  const std::vector<unsigned char> bytes = Download(root_in_place ? send_buffer : recv_buffer);
  ExpectBlock(context, what, dtype, std::nullopt, bytes,
              root_in_place ? count * static_cast<size_t>(root) : 0, count, [&](size_t index) {
                return MovedValue(dtype, world, root, static_cast<size_t>(rank) * count + index);
              });
}

}  // namespace

void VariableCollectivesMatchHostReference(RankContext& context) {
  for (DLDataType dtype : VariableMovementTypes()) {
    CheckAllToAllV(context, dtype);
    for (bool in_place : {false, true}) {
      CheckAllGatherV(context, dtype, in_place);
      for (size_t count : kCounts) {
        CheckGather(context, dtype, count, in_place);
        CheckScatter(context, dtype, count, in_place);
      }
    }
  }
  const DLDataType e4m3{INFINI_CCL_DL_FLOAT8_E4M3FN, 8, 1};
  const DLDataType boolean{INFINI_CCL_DL_BOOL, 8, 1};
  const std::vector<std::pair<DLDataType, ReduceOp>> reductions = {
      {dtype::kFloat32, ReduceOp::kSum},  {dtype::kFloat32, ReduceOp::kProd},
      {dtype::kFloat32, ReduceOp::kMax},  {dtype::kFloat32, ReduceOp::kMin},
      {dtype::kFloat32, ReduceOp::kAvg},  {dtype::kInt32, ReduceOp::kSum},
      {dtype::kBFloat16, ReduceOp::kAvg}, {e4m3, ReduceOp::kSum},
      {boolean, ReduceOp::kMax},          {boolean, ReduceOp::kMin}};
  for (const auto& [dtype, op] : reductions) {
    for (bool in_place : {false, true}) CheckReduceScatterV(context, dtype, op, in_place);
  }
}

namespace {

const std::map<std::string, std::function<void(RankContext&)>>& Scenarios() {
  static const std::map<std::string, std::function<void(RankContext&)>> scenarios = {
      {"collectives", CollectivesMatchHostReference},
      {"grouped", GroupedCollectivesMatchHostReference},
      {"p2p_ring", P2pRingDeliversNeighbourData},
      {"p2p_pairs", P2pPairsExchangeOutsideGroups},
      {"split", SplitCommunicatorsHaveExpectedMembers},
      {"barrier", BarrierCompletes},
      {"graph", GraphReplayedAllReduceMatchesHostReference},
      {"large", LargeAllReduceMatchesHostReference},
      {"variable", VariableCollectivesMatchHostReference},
  };
  return scenarios;
}

}  // namespace

const std::vector<std::string>& ScenarioNames() {
  static const std::vector<std::string> names = {"collectives", "grouped", "p2p_ring",
                                                 "p2p_pairs",   "split",   "barrier",
                                                 "graph",       "large",   "variable"};
  return names;
}

void RunScenario(const std::string& name, RankContext& context) {
  if (name == "all") {
    for (const std::string& each : ScenarioNames()) Scenarios().at(each)(context);
    return;
  }
  // "a,b,c": several in order.
  std::stringstream names(name);
  for (std::string each; std::getline(names, each, ',');) {
    const auto found = Scenarios().find(each);
    if (found == Scenarios().end()) throw std::invalid_argument("unknown scenario '" + each + "'");
    found->second(context);
  }
}

}  // namespace infini::ccl::nccl_test
