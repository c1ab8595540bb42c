// The collective items: for each case, buffers filled from the host
// reference's inputs, one call on the world, and the result judged.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "suite_items.h"

namespace infini::conformance::internal {

ccl::DeviceBuffer Upload(const RankContext& context, DLDataType dtype,
                         const std::vector<double>& values, size_t capacity_elements) {
  const size_t width = ccl::ElementBytes(dtype);
  const size_t elements = std::max(values.size(), capacity_elements);
  ccl::DeviceBuffer buffer(context.backend, elements * width);
  if (elements > values.size()) {
    // Whatever the collective must not touch holds a sentinel.
    const std::vector<unsigned char> fill(elements * width, 0x5a);
    buffer.CopyFromHost(fill.data(), fill.size());
  }
  const std::vector<unsigned char> bytes = Encode(dtype, values);
  if (!bytes.empty()) buffer.CopyFromHost(bytes.data(), bytes.size());
  return buffer;
}

void Place(const ccl::DeviceBuffer& buffer, DLDataType dtype, const std::vector<double>& values,
           size_t offset_elements) {
  const std::vector<unsigned char> bytes = Encode(dtype, values);
  if (!bytes.empty()) {
    buffer.CopyFromHost(bytes.data(), bytes.size(), offset_elements * ccl::ElementBytes(dtype));
  }
}

std::vector<double> Download(const ccl::DeviceBuffer& buffer, DLDataType dtype,
                             size_t offset_elements, size_t count) {
  const size_t width = ccl::ElementBytes(dtype);
  std::vector<unsigned char> bytes(count * width);
  if (!bytes.empty()) buffer.CopyToHost(bytes.data(), bytes.size(), offset_elements * width);
  return Decode(dtype, bytes.data(), count);
}

std::string Judge(const CaseSpec& spec, int world_size, const std::vector<double>& expected,
                  const std::vector<double>& actual) {
  const Comparison comparison = Compare(spec.dtype, spec.purpose, world_size, expected, actual);
  return comparison.ok() ? "" : comparison.Describe();
}

std::vector<unsigned char> SentinelBytes(DLDataType dtype, size_t elements) {
  const std::vector<unsigned char> one = SentinelElement(dtype);
  std::vector<unsigned char> bytes;
  bytes.reserve(elements * one.size());
  for (size_t index = 0; index < elements; ++index)
    bytes.insert(bytes.end(), one.begin(), one.end());
  return bytes;
}

GuardedBuffer::GuardedBuffer(const RankContext& context, DLDataType dtype, size_t elements,
                             const std::vector<double>& values)
    : dtype_(dtype),
      width_(ccl::ElementBytes(dtype)),
      guard_elements_((kGuardBytes + width_ - 1) / width_),
      buffer_(context.backend, (elements + 2 * guard_elements_) * width_) {
  std::vector<unsigned char> bytes = SentinelBytes(dtype, elements + 2 * guard_elements_);
  const std::vector<unsigned char> encoded = Encode(dtype, values);
  std::copy(encoded.begin(), encoded.end(),
            bytes.begin() + static_cast<ptrdiff_t>(guard_elements_ * width_));
  buffer_.CopyFromHost(bytes.data(), bytes.size());
}

ccl::FlatTensor GuardedBuffer::Tensor(int64_t count, int64_t offset_elements) const {
  return buffer_.AsTensor(dtype_, count, static_cast<int64_t>(guard_elements_) + offset_elements);
}

void GuardedBuffer::Place(const std::vector<double>& values, size_t offset_elements) const {
  const std::vector<unsigned char> bytes = Encode(dtype_, values);
  if (!bytes.empty()) {
    buffer_.CopyFromHost(bytes.data(), bytes.size(), (guard_elements_ + offset_elements) * width_);
  }
}

std::vector<unsigned char> GuardedBuffer::Bytes() const {
  std::vector<unsigned char> bytes(buffer_.bytes());
  buffer_.CopyToHost(bytes.data(), bytes.size());
  return bytes;
}

std::vector<double> GuardedBuffer::Values(const std::vector<unsigned char>& bytes, size_t offset,
                                          size_t count) const {
  return Decode(dtype_, bytes.data() + (guard_elements_ + offset) * width_, count);
}

std::string GuardedBuffer::GuardProblem(const std::vector<unsigned char>& bytes,
                                        const char* name) const {
  const std::vector<unsigned char> sentinel = SentinelBytes(dtype_, guard_elements_);
  const size_t guard_bytes = sentinel.size();
  if (!std::equal(sentinel.begin(), sentinel.end(), bytes.begin())) {
    return std::string("wrote before the start of the ") + name + " buffer";
  }
  if (!std::equal(sentinel.begin(), sentinel.end(),
                  bytes.end() - static_cast<ptrdiff_t>(guard_bytes))) {
    return std::string("wrote past the end of the ") + name + " buffer";
  }
  return "";
}

std::string GuardedBuffer::ChangedFrom(const std::vector<unsigned char>& bytes,
                                       const std::vector<double>& values) const {
  const std::vector<unsigned char> encoded = Encode(dtype_, values);
  const auto first = bytes.begin() + static_cast<ptrdiff_t>(guard_elements_ * width_);
  const auto mismatch = std::mismatch(encoded.begin(), encoded.end(), first);
  if (mismatch.first == encoded.end()) return "";
  return "element " +
         std::to_string((mismatch.first - encoded.begin()) / static_cast<ptrdiff_t>(width_)) +
         " of the send buffer changed (an out-of-place call must only read it)";
}

void AwaitCompletion(RankContext& context, int64_t case_number) {
  // Never the stream's synchronize: an event's word is checked, and the
  // data is read right after it says done. Half the cases wait on the
  // event, half poll it, as frameworks do.
  ccl::Event done(context.backend);
  done.Record(context.stream);
  if (case_number % 2 == 0) {
    done.Synchronize();
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + context.options.item_timeout;
  while (!done.Query()) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("event_query never said done");
    }
    std::this_thread::yield();
  }
}

namespace {

// The combinations every port must serve: float32, and the four operators
// every vendor library has. Anything else may be declared unsupported.
bool Required(Collective collective, DLDataType dtype, ReduceOp op) {
  const bool required_entry =
      collective == Collective::kAllReduce || collective == Collective::kBroadcast ||
      collective == Collective::kReduce || collective == Collective::kAllGather ||
      collective == Collective::kReduceScatter || collective == Collective::kSend;
  return required_entry && ccl::operator==(dtype, ccl::dtype::kFloat32) &&
         (!ccl::IsReduction(collective) || op != ReduceOp::kAvg);
}

// Collectives whose send or receive buffer holds a block of `count` per
// rank.
bool BlockPerRank(Collective collective) {
  return collective == Collective::kAllGather || collective == Collective::kReduceScatter ||
         collective == Collective::kAllToAll || collective == Collective::kGather ||
         collective == Collective::kScatter || collective == Collective::kAllToAllV ||
         collective == Collective::kAllGatherV || collective == Collective::kReduceScatterV;
}

bool Rooted(Collective collective) {
  return collective == Collective::kBroadcast || collective == Collective::kReduce ||
         collective == Collective::kGather || collective == Collective::kScatter;
}

std::string Describe(const CaseSpec& spec, int root) {
  std::string text =
      "count " + std::to_string(spec.count) + (spec.in_place ? " in place" : " out of place");
  if (root >= 0) text += ", root " + std::to_string(root);
  return text;
}

// The buffers of one case: what the rank sends and where it receives
// (the same buffer in place), each between guards; the send buffer's
// values, for the unchanged check.
struct CaseBuffers {
  std::optional<GuardedBuffer> send;
  std::optional<GuardedBuffer> recv;
  std::vector<double> sent;
  const GuardedBuffer& receive() const { return recv ? *recv : *send; }
};

// What is wrong with the buffers after the call besides the result: a
// guard overwritten, an out-of-place send buffer changed. "" when nothing.
std::string CheckSideEffects(const CaseBuffers& buffers, std::vector<unsigned char>* recv_bytes) {
  if (buffers.recv) {
    const std::vector<unsigned char> send_bytes = buffers.send->Bytes();
    if (std::string bad = buffers.send->GuardProblem(send_bytes, "send"); !bad.empty()) return bad;
    if (std::string bad = buffers.send->ChangedFrom(send_bytes, buffers.sent); !bad.empty())
      return bad;
  }
  *recv_bytes = buffers.receive().Bytes();
  return buffers.receive().GuardProblem(*recv_bytes, buffers.recv ? "receive" : "in-place");
}

// Out of place: send holds `sent`, recv `recv_elements` sentinels. In
// place: one buffer of max(sent, recv) elements holding `sent` at
// `sent_offset`.
CaseBuffers MakeBuffers(const RankContext& context, const CaseSpec& spec, std::vector<double> sent,
                        size_t recv_elements, size_t sent_offset = 0) {
  CaseBuffers buffers;
  if (spec.in_place) {
    buffers.send.emplace(context, spec.dtype, std::max(recv_elements, sent.size() + sent_offset));
    buffers.send->Place(sent, sent_offset);
  } else {
    buffers.send.emplace(context, spec.dtype, sent.size(), sent);
    buffers.recv.emplace(context, spec.dtype, recv_elements);
  }
  buffers.sent = std::move(sent);
  return buffers;
}

// The p2p ring (to the next rank, from the previous), then, with 3 ranks
// or more, every pair: each rank sends a block of its own to every other
// and receives one from each, so a receive matched to the wrong peer shows.
std::string RunPointToPoint(RankContext& context, const CaseSpec& spec, int64_t case_number) {
  const ccl::Communicator& comm = context.world;
  const int rank = context.rank;
  const int world = context.world_size;
  const DLDataType dtype = spec.dtype;
  const int64_t count = spec.count;
  const auto ucount = static_cast<size_t>(count);
  const bool grouped = context.capabilities().group();
  // Block from `from` to `to`: from's inputs at to × count.
  auto block = [&](int from, int to) {
    return InputValues(dtype, std::nullopt, from, world, int64_t{to} * count, count);
  };
  std::vector<int> peers;  // the ring's next (and previous) first
  const int next = (rank + 1) % world, previous = (rank + world - 1) % world;
  if (world < 3) {
    peers = {next};
  } else {
    for (int peer = 0; peer < world; ++peer) {
      if (peer != rank) peers.push_back(peer);
    }
  }
  std::vector<GuardedBuffer> sends, recvs;
  std::vector<std::vector<double>> sent;
  for (int peer : peers) {
    const int to = world < 3 ? next : peer;
    sent.push_back(block(rank, to));
    sends.emplace_back(context, dtype, ucount, sent.back());
    recvs.emplace_back(context, dtype, ucount);
  }
  auto source_of = [&](size_t index) { return world < 3 ? previous : peers[index]; };
  auto target_of = [&](size_t index) { return world < 3 ? next : peers[index]; };
  if (grouped) {
    // Receives posted in the reverse order of the sends' arrival.
    context.backend->GroupStart();
    for (size_t index = 0; index < peers.size(); ++index) {
      comm.Send(sends[index].Tensor(count), target_of(index), context.stream);
    }
    for (size_t index = peers.size(); index-- > 0;) {
      comm.Recv(recvs[index].Tensor(count), source_of(index), context.stream);
    }
    context.backend->GroupEnd();
  } else if (world < 3) {
    if (rank % 2 == 0) {  // blocking sends: half the ring sends first
      comm.Send(sends[0].Tensor(count), next, context.stream);
      comm.Recv(recvs[0].Tensor(count), previous, context.stream);
    } else {
      comm.Recv(recvs[0].Tensor(count), previous, context.stream);
      comm.Send(sends[0].Tensor(count), next, context.stream);
    }
  } else {
    // Pairs in one global order; the lower rank of a pair sends first.
    for (size_t index = 0; index < peers.size(); ++index) {
      const int peer = peers[index];
      if (rank < peer) {
        comm.Send(sends[index].Tensor(count), peer, context.stream);
        comm.Recv(recvs[index].Tensor(count), peer, context.stream);
      } else {
        comm.Recv(recvs[index].Tensor(count), peer, context.stream);
        comm.Send(sends[index].Tensor(count), peer, context.stream);
      }
    }
  }
  AwaitCompletion(context, case_number);
  for (size_t index = 0; index < peers.size(); ++index) {
    const std::vector<unsigned char> send_bytes = sends[index].Bytes();
    if (std::string bad = sends[index].GuardProblem(send_bytes, "send"); !bad.empty()) return bad;
    if (std::string bad = sends[index].ChangedFrom(send_bytes, sent[index]); !bad.empty())
      return bad;
    const std::vector<unsigned char> recv_bytes = recvs[index].Bytes();
    if (std::string bad = recvs[index].GuardProblem(recv_bytes, "receive"); !bad.empty())
      return bad;
    const int source = source_of(index);
    const std::string wrong =
        Judge(spec, world, block(source, rank), recvs[index].Values(recv_bytes, 0, ucount));
    if (!wrong.empty()) return "from rank " + std::to_string(source) + ": " + wrong;
  }
  return "";
}

std::string RunCase(RankContext& context, const CaseSpec& spec, int root, int64_t case_number) {
  const ccl::Communicator& comm = context.world;
  // The layout the suite was asked to run, never the plugin's answers: a
  // library that made smaller communicators than asked must not be judged
  // against its own smaller world.
  const int rank = context.rank;
  const int world = context.world_size;
  const DLDataType dtype = spec.dtype;
  const int64_t count = spec.count;
  const auto ucount = static_cast<size_t>(count);
  const ReduceOp op = spec.purpose.value_or(ReduceOp::kSum);
  const ccl::Stream& stream = context.stream;
  auto inputs = [&](int64_t first, int64_t n) {
    return InputValues(dtype, spec.purpose, rank, world, first, n);
  };
  CaseBuffers buffers;
  std::vector<double> expected;
  size_t result_offset = 0;
  size_t result_count = ucount;
  bool result_defined = true;
  switch (spec.collective) {
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kBroadcast: {
      // Broadcast's input matters on the root only; the others send their
      // own anyway, so that taking a wrong root's data shows.
      buffers = MakeBuffers(context, spec, inputs(0, count), ucount);
      const auto send = buffers.send->Tensor(count);
      const auto recv = buffers.receive().Tensor(count);
      if (spec.collective == Collective::kAllReduce) {
        comm.AllReduce(send, recv, op, stream);
        expected = ExpectAllReduce(dtype, op, world, count);
      } else if (spec.collective == Collective::kReduce) {
        comm.Reduce(send, recv, op, root, stream);
        expected = ExpectAllReduce(dtype, op, world, count);
        result_defined = rank == root;
      } else {
        comm.Broadcast(send, recv, root, stream);
        expected = ExpectBroadcast(dtype, world, root, count);
      }
      break;
    }
    case Collective::kAllGather: {
      buffers = MakeBuffers(context, spec, inputs(0, count), ucount * world, ucount * rank);
      const auto own =
          spec.in_place ? buffers.send->Tensor(count, count * rank) : buffers.send->Tensor(count);
      comm.AllGather(own, buffers.receive().Tensor(count * world), stream);
      expected = ExpectAllGather(dtype, world, count);
      result_count = ucount * world;
      break;
    }
    case Collective::kReduceScatter: {
      buffers = MakeBuffers(context, spec, inputs(0, count * world), ucount);
      const auto out =
          spec.in_place ? buffers.send->Tensor(count, count * rank) : buffers.recv->Tensor(count);
      comm.ReduceScatter(buffers.send->Tensor(count * world), out, op, stream);
      expected = ExpectReduceScatter(dtype, op, world, rank, count);
      result_offset = spec.in_place ? ucount * rank : 0;
      break;
    }
    case Collective::kAllToAll: {
      buffers = MakeBuffers(context, spec, inputs(0, count * world), ucount * world);
      comm.AllToAll(buffers.send->Tensor(count * world), buffers.receive().Tensor(count * world),
                    stream);
      expected = ExpectAllToAll(dtype, world, rank, count);
      result_count = ucount * world;
      break;
    }
    case Collective::kGather: {
      buffers = MakeBuffers(context, spec, inputs(0, count), ucount * world);
      comm.Gather(buffers.send->Tensor(count), buffers.recv->Tensor(count * world), root, stream);
      expected = ExpectAllGather(dtype, world, count);
      result_count = ucount * world;
      result_defined = rank == root;
      break;
    }
    case Collective::kScatter: {
      buffers = MakeBuffers(context, spec, inputs(0, count * world), ucount);
      comm.Scatter(buffers.send->Tensor(count * world), buffers.recv->Tensor(count), root, stream);
      expected = ExpectScatter(dtype, world, root, rank, count);
      break;
    }
    case Collective::kAllToAllV: {
      const VariableLayout layout(world, ucount);
      buffers = MakeBuffers(context, spec, inputs(0, static_cast<int64_t>(layout.SendTotal(rank))),
                            layout.RecvTotal(rank));
      comm.AllToAllV(buffers.send->Tensor(static_cast<int64_t>(layout.SendTotal(rank))),
                     layout.SendCounts(rank), layout.SendDisplacements(rank),
                     buffers.recv->Tensor(static_cast<int64_t>(layout.RecvTotal(rank))),
                     layout.RecvCounts(rank), layout.RecvDisplacements(rank), stream);
      expected = ExpectAllToAllV(dtype, layout, rank);
      result_count = layout.RecvTotal(rank);
      break;
    }
    case Collective::kAllGatherV: {
      const VariableLayout layout(world, ucount);
      buffers = MakeBuffers(context, spec, inputs(0, static_cast<int64_t>(layout.ShareCount(rank))),
                            layout.ShareTotal());
      comm.AllGatherV(buffers.send->Tensor(static_cast<int64_t>(layout.ShareCount(rank))),
                      buffers.recv->Tensor(static_cast<int64_t>(layout.ShareTotal())),
                      layout.ShareCounts(), layout.ShareDisplacements(), stream);
      expected = ExpectAllGatherV(dtype, layout);
      result_count = layout.ShareTotal();
      break;
    }
    case Collective::kReduceScatterV: {
      const VariableLayout layout(world, ucount);
      buffers = MakeBuffers(context, spec, inputs(0, static_cast<int64_t>(layout.ShareTotal())),
                            layout.ShareCount(rank));
      comm.ReduceScatterV(buffers.send->Tensor(static_cast<int64_t>(layout.ShareTotal())),
                          layout.ShareCounts(), layout.ShareDisplacements(),
                          buffers.recv->Tensor(static_cast<int64_t>(layout.ShareCount(rank))), op,
                          stream);
      expected = ExpectReduceScatterV(dtype, op, layout, rank);
      result_count = layout.ShareCount(rank);
      break;
    }
    case Collective::kSend:
      return RunPointToPoint(context, spec, case_number);
    default:
      return "no case for " + std::string(ccl::CollectiveName(spec.collective));
  }
  AwaitCompletion(context, case_number);
  std::vector<unsigned char> recv_bytes;
  if (std::string bad = CheckSideEffects(buffers, &recv_bytes); !bad.empty()) return bad;
  if (!result_defined) return "";  // the receive buffer off the root is unspecified
  return Judge(spec, world, expected,
               buffers.receive().Values(recv_bytes, result_offset, result_count));
}

std::string ItemName(Collective collective, DLDataType dtype, std::optional<ReduceOp> op) {
  std::string name = collective == Collective::kSend ? "send_recv_ring"
                                                     : std::string(ccl::CollectiveName(collective));
  name += "/" + ccl::DataTypeName(dtype);
  if (op) name += "/" + std::string(ccl::ReduceOpName(*op));
  return name;
}

}  // namespace

Item CollectiveItem(Collective collective, DLDataType dtype, std::optional<ReduceOp> op,
                    const ccl::Capabilities& capabilities, int world_size) {
  Item item;
  item.name = ItemName(collective, dtype, op);
  const ReduceOp declared_op = op.value_or(ReduceOp::kSum);
  const bool declared = capabilities.Supports(collective, dtype, declared_op) &&
                        (collective != Collective::kSend ||
                         capabilities.Supports(Collective::kRecv, dtype, declared_op));
  if (!declared) {
    const bool required = Required(collective, dtype, declared_op);
    item.needs_world = false;
    item.run = [required](RankContext&) {
      return required ? Outcome{Verdict::kMissing,
                                "supports() declares it unsupported, but every port must serve it",
                                false}
                      : Unsupported("declared unsupported by the plugin");
    };
    return item;
  }
  if (collective == Collective::kSend && world_size == 1 && !capabilities.group()) {
    item.needs_world = false;
    item.run = [](RankContext&) {
      return Unsupported("a ring of one rank needs group entries (a blocking send to itself)");
    };
    return item;
  }
  item.run = [collective, dtype, op](RankContext& context) {
    int64_t case_number = 0;
    std::string first_wrong;
    for (int64_t count : infini::conformance::CountsFor(context.options, dtype)) {
      // The largest float32 message is a rank's whole buffer: where a
      // buffer holds a block per rank, the count is divided among them.
      if (count == context.options.largest_float32_count && BlockPerRank(collective)) {
        count = std::max<int64_t>(1, count / context.world_size) | 1;
      }
      std::vector<int> roots = {-1};
      if (Rooted(collective)) {
        roots.clear();
        const int world = context.world_size;
        if (count <= context.options.every_root_up_to) {
          for (int root = 0; root < world; ++root) roots.push_back(root);
        } else {
          roots.push_back(world - 1);  // not 0, so that a root mix-up shows
        }
      }
      for (int root : roots) {
        for (bool in_place : {false, true}) {
          if (in_place && !ccl::HasInPlaceForm(collective)) continue;
          const CaseSpec spec{collective, dtype, op, count, in_place};
          const std::string wrong = RunCase(context, spec, root, case_number++);
          // Every rank runs every case, so that collectives stay matched
          // when only some ranks see a case wrong; the first one is the
          // verdict.
          if (!wrong.empty() && first_wrong.empty()) {
            first_wrong = Describe(spec, root) + ": " + wrong;
          }
        }
      }
    }
    if (!first_wrong.empty()) return Fail(first_wrong);
    return Pass(ToleranceText(dtype, op, context.world_size));
  };
  return item;
}

}  // namespace infini::conformance::internal

namespace infini::conformance {

std::vector<int64_t> CountsFor(const SuiteOptions& options, DLDataType dtype) {
  std::vector<int64_t> counts = options.counts;
  const auto width = static_cast<int64_t>(ccl::ElementBytes(dtype));
  const bool one_per_width =
      ccl::operator==(dtype, ccl::dtype::kFloat32) || ccl::operator==(dtype, ccl::dtype::kInt8) ||
      ccl::operator==(dtype, ccl::dtype::kBFloat16) || ccl::operator==(dtype, ccl::dtype::kFloat64);
  // Past the byte size, and odd, so no vector width divides it.
  if (options.large_for_every_type || one_per_width) {
    counts.push_back(options.large_bytes / width + 5);
  }
  if (ccl::operator==(dtype, ccl::dtype::kFloat32) &&
      options.largest_float32_count > counts.back()) {
    counts.push_back(options.largest_float32_count);
  }
  return counts;
}

}  // namespace infini::conformance
