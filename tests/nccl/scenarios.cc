#include "scenarios.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "host_values.h"

namespace infini::ccl::nccl_test {
namespace {

enum class Collective { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll };

const char* Name(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReduce:
      return "reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllToAll:
      return "all_to_all";
  }
  return "?";
}

bool Reduces(Collective collective) {
  return collective == Collective::kAllReduce || collective == Collective::kReduce ||
         collective == Collective::kReduceScatter;
}

const std::vector<ReduceOp>& AllOps() {
  static const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax,
                                            ReduceOp::kMin, ReduceOp::kAvg};
  return ops;
}

// Element `index` of rank `rank`'s input: small positive integers, exact in
// every type (fp8 included), that differ between ranks. Products use 1 and 2
// only, so that they stay exact for many ranks; bool uses 0 and 1.
double InputValue(const TypeCase& type, int rank, size_t index, ReduceOp op) {
  if (IsBool(type)) return static_cast<double>((index + static_cast<size_t>(rank)) % 3 == 0);
  if (op == ReduceOp::kProd) return 1.0 + static_cast<double>((index + rank) % 2);
  return 1.0 + static_cast<double>((index * 7 + static_cast<size_t>(rank) * 3) % 4);
}

// op over ranks of element `index`, as NCCL defines it (integer avg truncates).
double Reference(const TypeCase& type, ReduceOp op, int world_size, size_t index) {
  double result = InputValue(type, 0, index, op);
  for (int rank = 1; rank < world_size; ++rank) {
    const double value = InputValue(type, rank, index, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        result += value;
        break;
      case ReduceOp::kProd:
        result *= value;
        break;
      case ReduceOp::kMax:
        result = std::max(result, value);
        break;
      case ReduceOp::kMin:
        result = std::min(result, value);
        break;
    }
  }
  if (op == ReduceOp::kAvg) {
    result /= world_size;
    if (type.integer) result = std::trunc(result);
  }
  return result;
}

bool Close(const TypeCase& type, double actual, double expected) {
  if (type.integer) return actual == expected;
  return std::fabs(actual - expected) <= type.tolerance * std::max(1.0, std::fabs(expected));
}

// One collective call to check.
struct Case {
  Collective collective;
  TypeCase type;
  ReduceOp op;
  size_t count;  // per-rank block: see SendCount/RecvCount
  bool in_place;
  int root;
};

// Built with append: GCC 12 at -O3 reports a false -Wrestrict on the
// equivalent chain of operator+.
std::string Describe(const Case& c) {
  std::string text = Name(c.collective);
  text.append(" ").append(c.type.name);
  if (Reduces(c.collective)) text.append(" ").append(ReduceOpName(c.op));
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

// Expected element `index` of `rank`'s receive buffer; false when NCCL
// leaves it unspecified (reduce on a non-root rank).
bool Expected(const Case& c, int rank, int world_size, size_t index, double* value) {
  const size_t block = c.count;
  switch (c.collective) {
    case Collective::kAllReduce:
      *value = Reference(c.type, c.op, world_size, index);
      return true;
    case Collective::kReduce:
      *value = Reference(c.type, c.op, world_size, index);
      return rank == c.root;
    case Collective::kBroadcast:
      *value = InputValue(c.type, c.root, index, c.op);
      return true;
    case Collective::kAllGather:
      *value = InputValue(c.type, static_cast<int>(index / block), index % block, c.op);
      return true;
    case Collective::kReduceScatter:
      *value = Reference(c.type, c.op, world_size, static_cast<size_t>(rank) * block + index);
      return true;
    case Collective::kAllToAll:
      *value = InputValue(c.type, static_cast<int>(index / block),
                          static_cast<size_t>(rank) * block + index % block, c.op);
      return true;
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
  const DLDataType dtype = c.type.dtype;
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
  const size_t width = ElementBytes(c.type.dtype);
  const std::string what = Describe(c);

  HostArray input(c.type.dtype, SendCount(c, world));
  for (size_t index = 0; index < input.count(); ++index) {
    input.Set(index, InputValue(c.type, rank, index, c.op));
  }
  const size_t recv_count = RecvCount(c, world);
  const size_t recv_span = std::max(recv_count, SendCount(c, world)) * width;
  std::vector<unsigned char> sentinel(recv_span, 0xA5);
  if (recv_span > 0) buffers.recv.CopyFromHost(sentinel.data(), recv_span);
  if (input.bytes() > 0) {
    const DeviceBuffer& target = c.in_place ? buffers.recv : buffers.send;
    target.CopyFromHost(input.data(), input.bytes(), InputOffset(c, rank) * width);
  }

  Issue(c, context, buffers);
  context.Wait(what);

  HostArray output(c.type.dtype, recv_count);
  if (output.bytes() > 0) {
    buffers.recv.CopyToHost(output.data(), output.bytes(), ResultOffset(c, rank) * width);
  }
  for (size_t index = 0; index < recv_count; ++index) {
    double expected = 0;
    if (!Expected(c, rank, world, index, &expected)) return;
    // The reference as the type stores it (integers wrap like the device).
    HostArray stored(c.type.dtype, 1);
    stored.Set(0, expected);
    if (!Close(c.type, output.Get(index), c.type.integer ? stored.Get(0) : expected)) {
      context.Expect(false, what + ": element " + std::to_string(index) + " is " +
                                std::to_string(output.Get(index)) + ", expected " +
                                std::to_string(expected));
      return;
    }
  }
}

Buffers MakeBuffers(const RankContext& context, size_t max_count) {
  const size_t bytes = max_count * static_cast<size_t>(context.world_size) * sizeof(double);
  return Buffers{DeviceBuffer(context.backend, bytes), DeviceBuffer(context.backend, bytes)};
}

constexpr size_t kCounts[] = {0, 1, 1001};

// Every NCCL type, and bool (moved as bytes, reduced as uint8).
std::vector<TypeCase> MatrixTypes() {
  std::vector<TypeCase> types = ReducibleTypes();
  types.push_back(BoolCase());
  return types;
}

// What the plugin reduces each type with (bool: max and min only).
std::vector<ReduceOp> OpsFor(const TypeCase& type) {
  if (IsBool(type)) return {ReduceOp::kMax, ReduceOp::kMin};
  return AllOps();
}

}  // namespace

void CollectivesMatchHostReference(RankContext& context) {
  const Buffers buffers = MakeBuffers(context, 1001);
  const int root = context.world_size - 1;  // a non-zero root catches more
  for (Collective collective :
       {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce, Collective::kAllGather,
        Collective::kReduceScatter, Collective::kAllToAll}) {
    for (const TypeCase& type : MatrixTypes()) {
      const std::vector<ReduceOp> ops =
          Reduces(collective) ? OpsFor(type) : std::vector<ReduceOp>{ReduceOp::kSum};
      for (ReduceOp op : ops) {
        for (size_t count : kCounts) {
          for (bool in_place : {false, true}) {
            // all_to_all has no in-place form in NCCL (blocks would be
            // overwritten before they are sent).
            if (in_place && collective == Collective::kAllToAll) continue;
            Check(Case{collective, type, op, count, in_place, root}, context, buffers);
          }
        }
      }
    }
  }
}

void GroupedCollectivesMatchHostReference(RankContext& context) {
  const Backend& backend = *context.backend;
  const TypeCase float32 = ReducibleTypes()[8];
  const TypeCase int32 = ReducibleTypes()[2];
  const size_t count = 257;
  const int world = context.world_size;
  const DLDataType f32 = float32.dtype;
  const DLDataType i32 = int32.dtype;
  DeviceBuffer reduce_in(context.backend, count * 4), reduce_out(context.backend, count * 4);
  DeviceBuffer gather_in(context.backend, count * 4),
      gather_out(context.backend, count * 4 * static_cast<size_t>(world));
  DeviceBuffer bcast(context.backend, count * 4);
  HostArray reduce_input(f32, count), gather_input(i32, count), bcast_input(f32, count);
  for (size_t index = 0; index < count; ++index) {
    reduce_input.Set(index, InputValue(float32, context.rank, index, ReduceOp::kSum));
    gather_input.Set(index, InputValue(int32, context.rank, index, ReduceOp::kSum));
    bcast_input.Set(index, context.rank == 0 ? InputValue(float32, 0, index, ReduceOp::kSum) : 0.0);
  }
  reduce_in.CopyFromHost(reduce_input.data(), reduce_input.bytes());
  gather_in.CopyFromHost(gather_input.data(), gather_input.bytes());
  bcast.CopyFromHost(bcast_input.data(), bcast_input.bytes());

  backend.GroupStart();
  context.comm->AllReduce(reduce_in.AsTensor(f32, count), reduce_out.AsTensor(f32, count),
                          ReduceOp::kSum, *context.stream);
  context.comm->AllGather(gather_in.AsTensor(i32, count),
                          gather_out.AsTensor(i32, count * static_cast<size_t>(world)),
                          *context.stream);
  context.comm->Broadcast(bcast.AsTensor(f32, count), bcast.AsTensor(f32, count), 0,
                          *context.stream);
  backend.GroupEnd();
  context.Wait("grouped all_reduce + all_gather + broadcast");

  HostArray reduced(f32, count), gathered(i32, count * static_cast<size_t>(world)),
      broadcast(f32, count);
  reduce_out.CopyToHost(reduced.data(), reduced.bytes());
  gather_out.CopyToHost(gathered.data(), gathered.bytes());
  bcast.CopyToHost(broadcast.data(), broadcast.bytes());
  for (size_t index = 0; index < count; ++index) {
    if (reduced.Get(index) != Reference(float32, ReduceOp::kSum, world, index) ||
        broadcast.Get(index) != InputValue(float32, 0, index, ReduceOp::kSum)) {
      context.Expect(
          false, "grouped all_reduce/broadcast: element " + std::to_string(index) + " is wrong");
      return;
    }
  }
  for (size_t index = 0; index < gathered.count(); ++index) {
    if (gathered.Get(index) !=
        InputValue(int32, static_cast<int>(index / count), index % count, ReduceOp::kSum)) {
      context.Expect(false, "grouped all_gather: element " + std::to_string(index) + " is wrong");
      return;
    }
  }
}

namespace {

// Sends `count` elements of `type` to `to` and receives from `from`; both
// inside one group when `grouped`, else ordered so that pairs cannot wait on
// each other (the lower rank sends first).
void Exchange(RankContext& context, const TypeCase& type, size_t count, int to, int from,
              bool grouped) {
  const Backend& backend = *context.backend;
  const size_t width = ElementBytes(type.dtype);
  DeviceBuffer out(context.backend, count * width), in(context.backend, count * width);
  HostArray input(type.dtype, count);
  for (size_t index = 0; index < count; ++index) {
    input.Set(index, InputValue(type, context.rank, index, ReduceOp::kSum));
  }
  if (input.bytes() > 0) out.CopyFromHost(input.data(), input.bytes());
  const auto n = static_cast<int64_t>(count);
  const std::string what = std::string(grouped ? "grouped" : "ungrouped") + " send/recv " +
                           type.name + " count=" + std::to_string(count);
  if (grouped) {
    backend.GroupStart();
    context.comm->Send(out.AsTensor(type.dtype, n), to, *context.stream);
    context.comm->Recv(in.AsTensor(type.dtype, n), from, *context.stream);
    backend.GroupEnd();
  } else if (context.rank < to) {
    context.comm->Send(out.AsTensor(type.dtype, n), to, *context.stream);
    context.comm->Recv(in.AsTensor(type.dtype, n), from, *context.stream);
  } else {
    context.comm->Recv(in.AsTensor(type.dtype, n), from, *context.stream);
    context.comm->Send(out.AsTensor(type.dtype, n), to, *context.stream);
  }
  context.Wait(what);
  HostArray received(type.dtype, count);
  if (received.bytes() > 0) in.CopyToHost(received.data(), received.bytes());
  for (size_t index = 0; index < count; ++index) {
    if (received.Get(index) != InputValue(type, from, index, ReduceOp::kSum)) {
      context.Expect(false, what + ": element " + std::to_string(index) + " is " +
                                std::to_string(received.Get(index)) + ", expected rank " +
                                std::to_string(from) + "'s data");
      return;
    }
  }
}

std::vector<TypeCase> P2pTypes() {
  const auto& types = ReducibleTypes();
  // float32, bfloat16, int8, float64, fp8 e4m3, and bool (moved as bytes).
  return {types[8], types[7], types[0], types[9], types[10], BoolCase()};
}

}  // namespace

void P2pRingDeliversNeighbourData(RankContext& context) {
  const int world = context.world_size;
  const int next = (context.rank + 1) % world;
  const int previous = (context.rank + world - 1) % world;
  for (const TypeCase& type : P2pTypes()) {
    for (size_t count : kCounts) Exchange(context, type, count, next, previous, true);
  }
}

void P2pPairsExchangeOutsideGroups(RankContext& context) {
  const int partner = context.rank ^ 1;
  if (partner >= context.world_size) return;  // odd world: the last rank sits out
  for (const TypeCase& type : P2pTypes()) Exchange(context, type, 1001, partner, partner, false);
}

namespace {

// all_gather of each member's old rank over `comm`.
std::vector<double> GatherOldRanks(RankContext& context, const Communicator& comm) {
  const DLDataType f32 = ReducibleTypes()[8].dtype;
  const auto members = static_cast<size_t>(comm.world_size());
  DeviceBuffer mine(context.backend, 4), all(context.backend, 4 * members);
  HostArray value(f32, 1);
  value.Set(0, context.rank);
  mine.CopyFromHost(value.data(), 4);
  comm.AllGather(mine.AsTensor(f32, 1), all.AsTensor(f32, static_cast<int64_t>(members)),
                 *context.stream);
  context.Wait("all_gather on a split communicator");
  HostArray gathered(f32, members);
  all.CopyToHost(gathered.data(), gathered.bytes());
  std::vector<double> ranks;
  for (size_t index = 0; index < members; ++index) ranks.push_back(gathered.Get(index));
  return ranks;
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
  const auto& plugin = context.backend->plugin();
  const DLDataType f32 = ReducibleTypes()[8].dtype;
  const size_t count = 64;
  const int replays = 3;
  DeviceBuffer buffer(context.backend, count * 4);
  HostArray ones(f32, count);
  for (size_t index = 0; index < count; ++index) ones.Set(index, 1.0);
  // NCCL connects peers lazily, at a communicator's first collective, and
  // connecting is not allowed while a stream is capturing: run one eagerly.
  context.comm->AllReduce(buffer.AsTensor(f32, count), buffer.AsTensor(f32, count), ReduceOp::kSum,
                          *context.stream);
  context.Wait("eager all_reduce before capture");
  buffer.CopyFromHost(ones.data(), ones.bytes());

  infiniCclStream_t stream = context.stream->handle();
  context.backend->Check(plugin.stream_begin_capture(stream), "stream_begin_capture");
  context.comm->AllReduce(buffer.AsTensor(f32, count), buffer.AsTensor(f32, count), ReduceOp::kSum,
                          *context.stream);
  infiniCclGraph_t graph = nullptr;
  context.backend->Check(plugin.stream_end_capture(stream, &graph), "stream_end_capture");
  context.Wait("capture");  // capturing ran nothing: the buffer still holds ones
  HostArray after_capture(f32, count);
  buffer.CopyToHost(after_capture.data(), after_capture.bytes());
  context.Expect(after_capture.Get(0) == 1.0, "capturing an all_reduce ran it");

  for (int replay = 0; replay < replays; ++replay) {
    context.backend->Check(plugin.graph_launch(graph, stream), "graph_launch");
  }
  context.Wait("graph replays");
  context.backend->Check(plugin.graph_destroy(graph), "graph_destroy");
  HostArray result(f32, count);
  buffer.CopyToHost(result.data(), result.bytes());
  const double expected = std::pow(context.world_size, replays);
  for (size_t index = 0; index < count; ++index) {
    if (result.Get(index) != expected) {
      context.Expect(false, "graph-replayed all_reduce: element " + std::to_string(index) + " is " +
                                std::to_string(result.Get(index)) + ", expected " +
                                std::to_string(expected));
      return;
    }
  }
}

void LargeAllReduceMatchesHostReference(RankContext& context) {
  constexpr size_t kBytes = size_t{256} << 20;
  constexpr size_t kCount = kBytes / sizeof(float);
  const DLDataType f32 = ReducibleTypes()[8].dtype;
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

// A device buffer of `count` elements of `type`, filled with `fill` (host
// values, or sentinel bytes where fill is empty).
DeviceBuffer Upload(const RankContext& context, const TypeCase& type, size_t count,
                    const std::function<double(size_t)>& fill) {
  const size_t bytes = std::max<size_t>(count * ElementBytes(type.dtype), 8);
  DeviceBuffer buffer(context.backend, bytes);
  std::vector<unsigned char> host(bytes, kSentinel);
  if (fill) {
    for (size_t index = 0; index < count; ++index) {
      Encode(type.dtype, fill(index), host.data() + index * ElementBytes(type.dtype));
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

// Elements [offset, offset + count) of `bytes` against `expected`; false
// (with one failure recorded) at the first difference.
bool ExpectBlock(RankContext& context, const std::string& what, const TypeCase& type,
                 const std::vector<unsigned char>& bytes, size_t offset, size_t count,
                 const std::function<double(size_t)>& expected) {
  const size_t width = ElementBytes(type.dtype);
  for (size_t index = 0; index < count; ++index) {
    const double actual = Decode(type.dtype, bytes.data() + (offset + index) * width);
    HostArray stored(type.dtype, 1);
    stored.Set(0, expected(index));
    if (!Close(type, actual, type.integer ? stored.Get(0) : expected(index))) {
      context.Expect(false, what + ": element " + std::to_string(index) + " of the block at " +
                                std::to_string(offset) + " is " + std::to_string(actual) +
                                ", expected " + std::to_string(expected(index)));
      return false;
    }
  }
  return true;
}

// Elements [from, to) still hold the sentinel.
bool ExpectUntouched(RankContext& context, const std::string& what, const TypeCase& type,
                     const std::vector<unsigned char>& bytes, size_t from, size_t to) {
  const size_t width = ElementBytes(type.dtype);
  for (size_t byte = from * width; byte < to * width; ++byte) {
    if (bytes[byte] != kSentinel) {
      context.Expect(false, what + ": element " + std::to_string(byte / width) +
                                " between blocks was written");
      return false;
    }
  }
  return true;
}

std::vector<TypeCase> VariableMovementTypes() {
  const auto& types = ReducibleTypes();
  // float32, bfloat16, int8, fp8 e5m2, and bool (moved as bytes).
  return {types[8], types[7], types[0], types[11], BoolCase()};
}

// Element `index` of the block rank `from` sends to rank `to`.
double PairValue(const TypeCase& type, int from, int to, size_t index) {
  return InputValue(type, from, static_cast<size_t>(to) * 64 + index, ReduceOp::kSum);
}

// Uneven, some empty: rank p sends ((3p + q) mod 4) x 17 elements to rank q.
size_t PairCount(int from, int to) { return static_cast<size_t>((3 * from + to) % 4) * 17; }

void CheckAllToAllV(RankContext& context, const TypeCase& type) {
  const int rank = context.rank;
  const int world = context.world_size;
  const std::string what = "all_to_all_v " + type.name;
  const Blocks send = MakeBlocks(world, 2, [&](int to) { return PairCount(rank, to); });
  const Blocks recv = MakeBlocks(world, 1, [&](int from) { return PairCount(from, rank); });
  std::vector<double> send_values(send.span, 0.0);
  for (int to = 0; to < world; ++to) {
    for (size_t index = 0; index < send.counts[to]; ++index) {
      send_values[send.displacements[to] + index] = PairValue(type, rank, to, index);
    }
  }
  const DeviceBuffer send_buffer =
      Upload(context, type, send.span, [&](size_t index) { return send_values[index]; });
  const DeviceBuffer recv_buffer = Upload(context, type, recv.span, {});
  context.comm->AllToAllV(send_buffer.AsTensor(type.dtype, static_cast<int64_t>(send.span)),
                          send.counts, send.displacements,
                          recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(recv.span)),
                          recv.counts, recv.displacements, *context.stream);
  context.Wait(what);
  const std::vector<unsigned char> bytes = Download(recv_buffer);
  for (int from = 0; from < world; ++from) {
    const size_t start = recv.displacements[from];
    if (!ExpectBlock(context, what + " from rank " + std::to_string(from), type, bytes, start,
                     recv.counts[from],
                     [&](size_t index) { return PairValue(type, from, rank, index); }) ||
        !ExpectUntouched(context, what, type, bytes, start + recv.counts[from],
                         start + recv.counts[from] + 1)) {
      return;
    }
  }
}

// Rank p contributes (p mod 3) x 19 elements: rank 0 none.
size_t GatherVCount(int rank) { return static_cast<size_t>(rank % 3) * 19; }

void CheckAllGatherV(RankContext& context, const TypeCase& type, bool in_place) {
  const int rank = context.rank;
  const int world = context.world_size;
  const std::string what = "all_gather_v " + type.name + (in_place ? " in-place" : " out-of-place");
  const Blocks recv = MakeBlocks(world, 1, GatherVCount);
  const size_t mine = recv.counts[rank];
  const auto own_value = [&](size_t index) {
    return InputValue(type, rank, index, ReduceOp::kSum);
  };
  // In place, this rank's block already sits at its place in recv.
  const DeviceBuffer recv_buffer =
      Upload(context, type, recv.span,
             in_place ? std::function<double(size_t)>([&](size_t index) {
               const size_t start = recv.displacements[rank];
               return index >= start && index < start + mine ? own_value(index - start)
                                                             : static_cast<double>(kSentinel);
             })
                      : std::function<double(size_t)>());
  const DeviceBuffer send_buffer = Upload(context, type, mine, own_value);
  const auto recv_tensor = recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(recv.span));
  const auto send_tensor =
      in_place ? recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(mine),
                                      static_cast<int64_t>(recv.displacements[rank]))
               : send_buffer.AsTensor(type.dtype, static_cast<int64_t>(mine));
  context.comm->AllGatherV(send_tensor, recv_tensor, recv.counts, recv.displacements,
                           *context.stream);
  context.Wait(what);
  const std::vector<unsigned char> bytes = Download(recv_buffer);
  for (int from = 0; from < world; ++from) {
    const size_t start = recv.displacements[from];
    if (!ExpectBlock(context, what + " from rank " + std::to_string(from), type, bytes, start,
                     recv.counts[from],
                     [&](size_t index) { return InputValue(type, from, index, ReduceOp::kSum); })) {
      return;
    }
    // In place, the gap bytes were encoded from the sentinel value, not raw.
    if (!in_place && !ExpectUntouched(context, what, type, bytes, start + recv.counts[from],
                                      start + recv.counts[from] + 1)) {
      return;
    }
  }
}

// Rank q receives (((q + 1) mod 3) x 23) reduced elements: rank 2 none.
size_t ScatterVCount(int rank) { return static_cast<size_t>((rank + 1) % 3) * 23; }

void CheckReduceScatterV(RankContext& context, const TypeCase& type, ReduceOp op, bool in_place) {
  const int rank = context.rank;
  const int world = context.world_size;
  const std::string what = "reduce_scatter_v " + type.name + " " + std::string(ReduceOpName(op)) +
                           (in_place ? " in-place" : "");
  const Blocks send = MakeBlocks(world, 1, ScatterVCount);
  // Element i of block q is element q*64 + i of the reference's input.
  std::vector<double> send_values(send.span, 0.0);
  for (int to = 0; to < world; ++to) {
    for (size_t index = 0; index < send.counts[to]; ++index) {
      send_values[send.displacements[to] + index] =
          InputValue(type, rank, static_cast<size_t>(to) * 64 + index, op);
    }
  }
  const DeviceBuffer send_buffer =
      Upload(context, type, send.span, [&](size_t index) { return send_values[index]; });
  const size_t mine = send.counts[rank];
  const DeviceBuffer recv_buffer = Upload(context, type, mine, {});
  const auto recv_tensor =
      in_place ? send_buffer.AsTensor(type.dtype, static_cast<int64_t>(mine),
                                      static_cast<int64_t>(send.displacements[rank]))
               : recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(mine));
  context.comm->ReduceScatterV(send_buffer.AsTensor(type.dtype, static_cast<int64_t>(send.span)),
                               send.counts, send.displacements, recv_tensor, op, *context.stream);
  context.Wait(what);
  const std::vector<unsigned char> bytes = Download(in_place ? send_buffer : recv_buffer);
  ExpectBlock(context, what, type, bytes, in_place ? send.displacements[rank] : 0, mine,
              [&](size_t index) {
                return Reference(type, op, world, static_cast<size_t>(rank) * 64 + index);
              });
}

void CheckGather(RankContext& context, const TypeCase& type, size_t count, bool in_place) {
  const int rank = context.rank;
  const int world = context.world_size;
  const int root = world - 1;
  const std::string what =
      "gather " + type.name + " count=" + std::to_string(count) + (in_place ? " in-place" : "");
  const auto value_of = [&](int from) {
    return [&type, from](size_t index) { return InputValue(type, from, index, ReduceOp::kSum); };
  };
  const size_t total = count * static_cast<size_t>(world);
  const bool root_in_place = in_place && rank == root;
  const DeviceBuffer recv_buffer =
      Upload(context, type, total,
             root_in_place ? std::function<double(size_t)>([&](size_t index) {
               return index / std::max<size_t>(count, 1) == static_cast<size_t>(root)
                          ? value_of(root)(index % count)
                          : static_cast<double>(kSentinel);
             })
                           : std::function<double(size_t)>());
  const DeviceBuffer send_buffer = Upload(context, type, count, value_of(rank));
  const auto send_tensor = root_in_place
                               ? recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(count),
                                                      static_cast<int64_t>(count) * root)
                               : send_buffer.AsTensor(type.dtype, static_cast<int64_t>(count));
  context.comm->Gather(send_tensor, recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(total)),
                       root, *context.stream);
  context.Wait(what);
  if (rank != root) return;  // recv matters on the root only
  const std::vector<unsigned char> bytes = Download(recv_buffer);
  for (int from = 0; from < world; ++from) {
    if (!ExpectBlock(context, what + " from rank " + std::to_string(from), type, bytes,
                     static_cast<size_t>(from) * count, count, value_of(from))) {
      return;
    }
  }
}

void CheckScatter(RankContext& context, const TypeCase& type, size_t count, bool in_place) {
  const int rank = context.rank;
  const int world = context.world_size;
  const int root = world - 1;
  const std::string what =
      "scatter " + type.name + " count=" + std::to_string(count) + (in_place ? " in-place" : "");
  const size_t total = count * static_cast<size_t>(world);
  // The root's block for rank r holds element r*count + i of its input.
  const DeviceBuffer send_buffer = Upload(context, type, total, [&](size_t index) {
    return InputValue(type, root, index, ReduceOp::kSum);
  });
  const DeviceBuffer recv_buffer = Upload(context, type, count, {});
  const bool root_in_place = in_place && rank == root;
  const auto recv_tensor = root_in_place
                               ? send_buffer.AsTensor(type.dtype, static_cast<int64_t>(count),
                                                      static_cast<int64_t>(count) * root)
                               : recv_buffer.AsTensor(type.dtype, static_cast<int64_t>(count));
  context.comm->Scatter(send_buffer.AsTensor(type.dtype, static_cast<int64_t>(total)), recv_tensor,
                        root, *context.stream);
  context.Wait(what);
  const std::vector<unsigned char> bytes = Download(root_in_place ? send_buffer : recv_buffer);
  ExpectBlock(context, what, type, bytes, root_in_place ? count * static_cast<size_t>(root) : 0,
              count, [&](size_t index) {
                return InputValue(type, root, static_cast<size_t>(rank) * count + index,
                                  ReduceOp::kSum);
              });
}

}  // namespace

void VariableCollectivesMatchHostReference(RankContext& context) {
  for (const TypeCase& type : VariableMovementTypes()) {
    CheckAllToAllV(context, type);
    for (bool in_place : {false, true}) {
      CheckAllGatherV(context, type, in_place);
      for (size_t count : kCounts) {
        CheckGather(context, type, count, in_place);
        CheckScatter(context, type, count, in_place);
      }
    }
  }
  const auto& types = ReducibleTypes();
  const std::vector<std::pair<TypeCase, ReduceOp>> reductions = {
      {types[8], ReduceOp::kSum},  {types[8], ReduceOp::kProd}, {types[8], ReduceOp::kMax},
      {types[8], ReduceOp::kMin},  {types[8], ReduceOp::kAvg},  {types[2], ReduceOp::kSum},
      {types[7], ReduceOp::kAvg},  {types[10], ReduceOp::kSum}, {BoolCase(), ReduceOp::kMax},
      {BoolCase(), ReduceOp::kMin}};
  for (const auto& [type, op] : reductions) {
    for (bool in_place : {false, true}) CheckReduceScatterV(context, type, op, in_place);
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
