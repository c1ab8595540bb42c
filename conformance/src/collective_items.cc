// The collective items: for each case, buffers filled from the host
// reference's inputs, one call on the world, and the result judged.
#include <algorithm>
#include <string>
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

std::string Judge(const CaseSpec& spec, const std::vector<double>& expected,
                  const std::vector<double>& actual) {
  const Comparison comparison = Compare(spec.dtype, spec.purpose, expected, actual);
  return comparison.ok() ? "" : comparison.Describe();
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

std::string Describe(const CaseSpec& spec) {
  return "count " + std::to_string(spec.count) + (spec.in_place ? " in place" : " out of place");
}

std::string RunCase(RankContext& context, const CaseSpec& spec) {
  const ccl::Communicator& comm = context.world;
  // The layout the suite was asked to run, never the plugin's answers: a
  // library that made smaller communicators than asked must not be judged
  // against its own smaller world.
  const int rank = context.rank;
  const int world = context.world_size;
  const int root = world - 1;  // not 0, so that a root mix-up shows
  const DLDataType dtype = spec.dtype;
  const int64_t count = spec.count;
  const auto ucount = static_cast<size_t>(count);
  const ReduceOp op = spec.purpose.value_or(ReduceOp::kSum);
  const ccl::Stream& stream = context.stream;
  auto inputs = [&](int64_t first, int64_t n) {
    return InputValues(dtype, spec.purpose, rank, world, first, n);
  };
  switch (spec.collective) {
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kBroadcast: {
      const bool reduce = spec.collective == Collective::kReduce;
      ccl::DeviceBuffer send = Upload(context, dtype, inputs(0, count));
      ccl::DeviceBuffer separate = Upload(context, dtype, {}, ucount);
      const ccl::DeviceBuffer& recv = spec.in_place ? send : separate;
      const auto send_tensor = send.AsTensor(dtype, count);
      const auto recv_tensor = recv.AsTensor(dtype, count);
      if (spec.collective == Collective::kAllReduce) {
        comm.AllReduce(send_tensor, recv_tensor, op, stream);
      } else if (reduce) {
        comm.Reduce(send_tensor, recv_tensor, op, root, stream);
      } else {
        comm.Broadcast(send_tensor, recv_tensor, root, stream);
      }
      stream.Synchronize();
      if (reduce && rank != root) return "";  // unspecified off the root
      const std::vector<double> expected = spec.collective == Collective::kBroadcast
                                               ? ExpectBroadcast(dtype, world, root, count)
                                               : ExpectAllReduce(dtype, op, world, count);
      return Judge(spec, expected, Download(recv, dtype, 0, ucount));
    }
    case Collective::kAllGather: {
      ccl::DeviceBuffer gathered = Upload(context, dtype, {}, ucount * world);
      ccl::DeviceBuffer own = Upload(context, dtype, inputs(0, count));
      if (spec.in_place) {
        Place(gathered, dtype, inputs(0, count), ucount * rank);
        comm.AllGather(gathered.AsTensor(dtype, count, count * rank),
                       gathered.AsTensor(dtype, count * world), stream);
      } else {
        comm.AllGather(own.AsTensor(dtype, count), gathered.AsTensor(dtype, count * world), stream);
      }
      stream.Synchronize();
      return Judge(spec, ExpectAllGather(dtype, world, count),
                   Download(gathered, dtype, 0, ucount * world));
    }
    case Collective::kReduceScatter: {
      ccl::DeviceBuffer send = Upload(context, dtype, inputs(0, count * world));
      ccl::DeviceBuffer separate = Upload(context, dtype, {}, ucount);
      size_t offset = 0;
      if (spec.in_place) {
        offset = ucount * rank;
        comm.ReduceScatter(send.AsTensor(dtype, count * world),
                           send.AsTensor(dtype, count, count * rank), op, stream);
      } else {
        comm.ReduceScatter(send.AsTensor(dtype, count * world), separate.AsTensor(dtype, count), op,
                           stream);
      }
      stream.Synchronize();
      return Judge(spec, ExpectReduceScatter(dtype, op, world, rank, count),
                   Download(spec.in_place ? send : separate, dtype, offset, ucount));
    }
    case Collective::kAllToAll: {
      ccl::DeviceBuffer send = Upload(context, dtype, inputs(0, count * world));
      ccl::DeviceBuffer recv = Upload(context, dtype, {}, ucount * world);
      comm.AllToAll(send.AsTensor(dtype, count * world), recv.AsTensor(dtype, count * world),
                    stream);
      stream.Synchronize();
      return Judge(spec, ExpectAllToAll(dtype, world, rank, count),
                   Download(recv, dtype, 0, ucount * world));
    }
    case Collective::kGather: {
      ccl::DeviceBuffer send = Upload(context, dtype, inputs(0, count));
      ccl::DeviceBuffer recv = Upload(context, dtype, {}, ucount * world);
      comm.Gather(send.AsTensor(dtype, count), recv.AsTensor(dtype, count * world), root, stream);
      stream.Synchronize();
      if (rank != root) return "";
      return Judge(spec, ExpectAllGather(dtype, world, count),
                   Download(recv, dtype, 0, ucount * world));
    }
    case Collective::kScatter: {
      ccl::DeviceBuffer send = Upload(context, dtype, inputs(0, count * world));
      ccl::DeviceBuffer recv = Upload(context, dtype, {}, ucount);
      comm.Scatter(send.AsTensor(dtype, count * world), recv.AsTensor(dtype, count), root, stream);
      stream.Synchronize();
      return Judge(spec, ExpectScatter(dtype, world, root, rank, count),
                   Download(recv, dtype, 0, ucount));
    }
    case Collective::kAllToAllV: {
      const VariableLayout layout(world, ucount);
      ccl::DeviceBuffer send = Upload(context, dtype, inputs(0, layout.SendTotal(rank)));
      ccl::DeviceBuffer recv = Upload(context, dtype, {}, layout.RecvTotal(rank));
      const auto send_counts = layout.SendCounts(rank),
                 send_displs = layout.SendDisplacements(rank);
      const auto recv_counts = layout.RecvCounts(rank),
                 recv_displs = layout.RecvDisplacements(rank);
      comm.AllToAllV(send.AsTensor(dtype, layout.SendTotal(rank)), send_counts, send_displs,
                     recv.AsTensor(dtype, layout.RecvTotal(rank)), recv_counts, recv_displs,
                     stream);
      stream.Synchronize();
      return Judge(spec, ExpectAllToAllV(dtype, layout, rank),
                   Download(recv, dtype, 0, layout.RecvTotal(rank)));
    }
    case Collective::kAllGatherV: {
      const VariableLayout layout(world, ucount);
      ccl::DeviceBuffer send = Upload(context, dtype, inputs(0, layout.ShareCount(rank)));
      ccl::DeviceBuffer recv = Upload(context, dtype, {}, layout.ShareTotal());
      comm.AllGatherV(send.AsTensor(dtype, layout.ShareCount(rank)),
                      recv.AsTensor(dtype, layout.ShareTotal()), layout.ShareCounts(),
                      layout.ShareDisplacements(), stream);
      stream.Synchronize();
      return Judge(spec, ExpectAllGatherV(dtype, layout),
                   Download(recv, dtype, 0, layout.ShareTotal()));
    }
    case Collective::kReduceScatterV: {
      const VariableLayout layout(world, ucount);
      ccl::DeviceBuffer send = Upload(context, dtype, inputs(0, layout.ShareTotal()));
      ccl::DeviceBuffer recv = Upload(context, dtype, {}, layout.ShareCount(rank));
      comm.ReduceScatterV(send.AsTensor(dtype, layout.ShareTotal()), layout.ShareCounts(),
                          layout.ShareDisplacements(),
                          recv.AsTensor(dtype, layout.ShareCount(rank)), op, stream);
      stream.Synchronize();
      return Judge(spec, ExpectReduceScatterV(dtype, op, layout, rank),
                   Download(recv, dtype, 0, layout.ShareCount(rank)));
    }
    case Collective::kSend: {  // a ring: to the next rank, from the previous
      const int next = (rank + 1) % world;
      const int previous = (rank + world - 1) % world;
      ccl::DeviceBuffer send = Upload(context, dtype, inputs(0, count));
      ccl::DeviceBuffer recv = Upload(context, dtype, {}, ucount);
      const auto send_tensor = send.AsTensor(dtype, count);
      const auto recv_tensor = recv.AsTensor(dtype, count);
      if (context.capabilities().group()) {
        context.backend->GroupStart();
        comm.Send(send_tensor, next, stream);
        comm.Recv(recv_tensor, previous, stream);
        context.backend->GroupEnd();
      } else if (rank % 2 == 0) {  // blocking sends: half the ring sends first
        comm.Send(send_tensor, next, stream);
        comm.Recv(recv_tensor, previous, stream);
      } else {
        comm.Recv(recv_tensor, previous, stream);
        comm.Send(send_tensor, next, stream);
      }
      stream.Synchronize();
      return Judge(spec, ExpectReceived(dtype, world, previous, count),
                   Download(recv, dtype, 0, ucount));
    }
    default:
      return "no case for " + std::string(ccl::CollectiveName(spec.collective));
  }
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
    for (int64_t count : context.options.counts) {
      for (bool in_place : {false, true}) {
        if (in_place && !ccl::HasInPlaceForm(collective)) continue;
        const CaseSpec spec{collective, dtype, op, count, in_place};
        const std::string wrong = RunCase(context, spec);
        if (!wrong.empty()) return Fail(Describe(spec) + ": " + wrong);
      }
    }
    return Pass();
  };
  return item;
}

}  // namespace infini::conformance::internal
