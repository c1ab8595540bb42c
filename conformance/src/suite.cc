#include "suite.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>

#include "infini/conformance/reference.h"

namespace infini::conformance {

std::string_view VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kUnsupported:
      return "unsupported";
    case Verdict::kMissing:
      return "missing";
    case Verdict::kFail:
      return "FAIL";
  }
  return "?";
}

// ---- ThreadMeeting ------------------------------------------------------------

bool ThreadMeeting::Arrive(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t generation = generation_;
  if (++waiting_ == threads_) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return true;
  }
  if (arrived_.wait_for(lock, timeout, [&] { return generation_ != generation; })) return true;
  --waiting_;
  return false;
}

ccl::Communicator ThreadMeeting::OnePerThread(
    int thread_rank, const std::function<std::vector<ccl::Communicator>()>& make,
    std::chrono::milliseconds timeout) {
  if (thread_rank == 0) {
    std::vector<ccl::Communicator> made;
    std::exception_ptr failure;
    try {
      made = make();
    } catch (...) {
      failure = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    made_ = std::move(made);
    failure_ = failure;
  }
  if (!Arrive(timeout)) {
    throw ccl::Error(infiniCclTimeout,
                     "the threads of this process did not all reach the "
                     "multi-device init within the item's timeout");
  }
  ccl::Communicator mine;
  std::exception_ptr failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failure = failure_;
    if (!failure && static_cast<size_t>(thread_rank) < made_.size()) {
      mine = std::move(made_[static_cast<size_t>(thread_rank)]);
    }
  }
  Arrive(timeout);  // every thread took its own before the next use
  if (thread_rank == 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    made_.clear();
    failure_ = nullptr;
  }
  if (failure) std::rethrow_exception(failure);
  return mine;
}

// ---- HangWatch ------------------------------------------------------------------

void HangWatch::Arm(std::chrono::steady_clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  deadline_ = deadline;
  fired_at_.reset();
}

void HangWatch::Disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  deadline_.reset();
  comms_.clear();
}

void HangWatch::Add(ccl::Communicator* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  comms_.push_back(comm);
}

void HangWatch::Remove(ccl::Communicator* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  comms_.erase(std::remove(comms_.begin(), comms_.end(), comm), comms_.end());
}

bool HangWatch::fired() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fired_at_.has_value();
}

std::chrono::milliseconds HangWatch::Check(std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!deadline_ || now < *deadline_) return std::chrono::milliseconds(0);
  if (!fired_at_) {
    fired_at_ = now;
    // Abort is safe while the rank's thread is blocked on the communicator.
    for (ccl::Communicator* comm : comms_) {
      if (comm->valid() && comm->backend()->capabilities().abort()) {
        try {
          comm->Abort();
        } catch (const std::exception&) {
          // The rank will report the hang; nothing more to do here.
        }
      }
    }
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - *fired_at_) +
         std::chrono::milliseconds(1);
}

// ---- Communicators ---------------------------------------------------------------

void RankContext::ActivateDevice() const {
  if (backend->info().device_type != kDLCPU) backend->SetDevice(device);
}

ccl::UniqueId RankContext::ShareUniqueId(const std::string& key,
                                         std::shared_ptr<ccl::BootstrapStore> bootstrap) {
  // "I<bytes>" or, when the root could not make one, "E<code> <why>", so
  // that the other ranks fail at once instead of waiting for an id.
  if (rank == 0) {
    try {
      ccl::UniqueId id = backend->GetUniqueId(std::move(bootstrap));
      store->Set(key + "/id", "I" + id.ToBytes());
      return id;
    } catch (const ccl::Error& error) {
      store->Set(key + "/id", "E" + std::to_string(error.code()) + " " + error.what());
      throw;
    }
  }
  const std::string shared = store->Get(key + "/id");
  if (!shared.empty() && shared[0] == 'I') return ccl::UniqueId::FromBytes(shared.substr(1));
  const size_t space = shared.find(' ');
  const int code = std::atoi(shared.substr(1, space).c_str());
  throw ccl::Error(static_cast<infiniCclResult_t>(code),
                   "global rank 0 could not make the unique id: " +
                       (space == std::string::npos ? shared : shared.substr(space + 1)));
}

ccl::Communicator RankContext::NewCommunicator(const std::string& key,
                                               const ccl::CommConfig& config) {
  auto bootstrap = MakeBootstrap(*run_store, key + "/bootstrap/");
  const ccl::UniqueId id = ShareUniqueId(key, bootstrap);
  return NewCommunicatorOnePerThread(key, id, config, bootstrap);
}

ccl::Communicator RankContext::NewCommunicatorOnePerThread(
    const std::string&, const ccl::UniqueId& id, const ccl::CommConfig& config,
    std::shared_ptr<ccl::BootstrapStore> bootstrap) {
  const ccl::Capabilities& caps = capabilities();
  if (caps.init_rank() && (threads == 1 || caps.concurrent_init())) {
    return backend->CommInitRank(world_size, id, rank, config, bootstrap);
  }
  // One thread makes every rank of this process (cnclInitComms-style).
  const int first_rank = rank - thread_rank;
  const int first_device = device - thread_rank;
  return meeting->OnePerThread(
      thread_rank,
      [&] {
        std::vector<int> ranks, devices;
        for (int t = 0; t < threads; ++t) {
          ranks.push_back(first_rank + t);
          devices.push_back(backend->info().device_type == kDLCPU ? 0 : first_device + t);
        }
        return backend->CommInitRanks(world_size, id, ranks, devices, config, bootstrap);
      },
      options.item_timeout);
}

// ---- Items ------------------------------------------------------------------------

namespace {

using ccl::Collective;

Outcome Pass(std::string detail = "") { return {Verdict::kPass, std::move(detail), false}; }
Outcome Unsupported(std::string detail) {
  return {Verdict::kUnsupported, std::move(detail), false};
}
Outcome Fail(std::string detail) { return {Verdict::kFail, std::move(detail), false}; }

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

ccl::DeviceBuffer Upload(const RankContext& context, DLDataType dtype,
                         const std::vector<double>& values, size_t capacity_elements = 0) {
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

// One call of a collective on the world, checked. Returns "" when right,
// else what is wrong on this rank.
struct CaseSpec {
  Collective collective;
  DLDataType dtype;
  Purpose purpose;  // the operator, or nullopt for moved data
  int64_t count;
  bool in_place;
};

std::string Describe(const CaseSpec& spec) {
  return "count " + std::to_string(spec.count) + (spec.in_place ? " in place" : " out of place");
}

std::string Judge(const CaseSpec& spec, const std::vector<double>& expected,
                  const std::vector<double>& actual) {
  const Comparison comparison = Compare(spec.dtype, spec.purpose, expected, actual);
  return comparison.ok() ? "" : comparison.Describe();
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

// ---- Items that are not one collective ---------------------------------------------

Outcome DeviceCount(RankContext& context) {
  const int count = context.backend->DeviceCount();
  if (!context.device_problem.empty()) return Fail(context.device_problem);
  return Pass(std::to_string(count) + " visible");
}

Outcome Memory(RankContext& context) {
  context.ActivateDevice();
  const DLDataType dtype = ccl::dtype::kInt32;
  const std::vector<double> values = InputValues(dtype, std::nullopt, context.rank, 1, 0, 1000);
  ccl::DeviceBuffer buffer = Upload(context, dtype, values);
  const std::string wrong = Judge({Collective::kBroadcast, dtype, std::nullopt, 1000, false},
                                  values, Download(buffer, dtype, 0, values.size()));
  if (!wrong.empty()) return Fail("host → device → host copy: " + wrong);
  context.backend->Check(context.backend->plugin().memset_async(buffer.data(), 0, 4000, nullptr),
                         "memset_async");
  context.backend->Check(context.backend->plugin().stream_synchronize(nullptr),
                         "stream_synchronize");
  const std::vector<double> zeros(1000, 0);
  const std::string not_zero = Judge({Collective::kBroadcast, dtype, std::nullopt, 1000, false},
                                     zeros, Download(buffer, dtype, 0, 1000));
  if (!not_zero.empty()) return Fail("memset_async: " + not_zero);
  return Pass();
}

Outcome StreamsAndEvents(RankContext& context) {
  context.ActivateDevice();
  ccl::Stream stream(context.backend);
  ccl::Event start(context.backend), stop(context.backend);
  start.Record(stream);
  stop.Record(stream);
  stream.WaitEvent(stop);
  stream.Synchronize();
  stop.Synchronize();
  if (!stop.Query()) return Fail("event_query says not done after event_synchronize");
  const float ms = stop.ElapsedMsSince(start);
  if (!(ms >= 0)) return Fail("event_elapsed_ms gave " + std::to_string(ms) + ", expected >= 0");
  return Pass();
}

Outcome UniqueIdThroughStore(RankContext& context) {
  const size_t declared = context.backend->info().unique_id_bytes;
  auto bootstrap = MakeBootstrap(*context.run_store, context.item_key + "/bootstrap/");
  const std::string bytes = context.ShareUniqueId(context.item_key, bootstrap).ToBytes();
  if (bytes.size() != declared) {
    return Fail("the id has " + std::to_string(bytes.size()) + " bytes, the plugin declares " +
                std::to_string(declared));
  }
  if (bytes == std::string(declared, '\0')) return Fail("get_unique_id left the id all zero");
  return Pass(std::to_string(declared) + " bytes");
}

Outcome WorldInit(RankContext& context) {
  if (context.world.valid()) {
    const ccl::Capabilities& caps = context.capabilities();
    const bool per_thread = caps.init_rank() && (context.threads == 1 || caps.concurrent_init());
    return Pass(per_thread ? "comm_init_rank on each rank's thread"
                           : "comm_init_ranks for the ranks of each process");
  }
  return {Verdict::kMissing, context.world_problem, false};
}

Outcome RankAndCount(RankContext& context) {
  int plugin_rank = -1, plugin_count = -1;
  const infiniCclPlugin_t& plugin = context.backend->plugin();
  context.backend->Check(plugin.comm_user_rank(context.world.handle(), &plugin_rank),
                         "comm_user_rank");
  context.backend->Check(plugin.comm_count(context.world.handle(), &plugin_count), "comm_count");
  if (plugin_rank != context.rank || plugin_count != context.world_size) {
    return Fail("comm_user_rank/comm_count say rank " + std::to_string(plugin_rank) + " of " +
                std::to_string(plugin_count) + ", expected " + std::to_string(context.rank) +
                " of " + std::to_string(context.world_size));
  }
  return Pass();
}

Outcome AsyncErrorWhenHealthy(RankContext& context) {
  std::string message;
  const infiniCclResult_t state = context.world.GetAsyncError(&message);
  if (state != infiniCclSuccess) {
    return Fail(std::string("a healthy communicator reports ") + ccl::ResultName(state) + ": " +
                message);
  }
  return Pass();
}

// Every rank adds to a counter, then enters the barrier; after it, the
// counter must hold every rank's addition.
Outcome BarrierOrders(RankContext& context) {
  const std::string counter = context.item_key + "/arrived";
  context.store->Add(counter, 1);
  context.world.Barrier(context.stream);
  context.stream.Synchronize();
  const int64_t arrived = context.store->Add(counter, 0);
  if (arrived < context.world_size) {
    return Fail("barrier returned on rank " + std::to_string(context.rank) + " when only " +
                std::to_string(arrived) + " of " + std::to_string(context.world_size) +
                " ranks had arrived");
  }
  return Pass(context.backend->plugin().barrier != nullptr ? "plugin barrier"
                                                           : "host fallback (all_reduce)");
}

// Where this rank stands in a communicator, as the suite laid it out.
struct Position {
  int rank;
  int world_size;
};

// A float32 sum all_reduce of `count` on `comm`, checked against `place`.
// `settled`, when given, runs between the enqueue and the stream's
// synchronization: a non-blocking communicator's call may still be in
// progress (not yet on the stream) when it returns.
std::string SumCheck(RankContext& context, const ccl::Communicator& comm, Position place,
                     int64_t count, const std::function<void()>& settled = {}) {
  const DLDataType dtype = ccl::dtype::kFloat32;
  const std::vector<double> values =
      InputValues(dtype, ReduceOp::kSum, place.rank, place.world_size, 0, count);
  ccl::DeviceBuffer buffer = Upload(context, dtype, values);
  comm.AllReduce(buffer.AsTensor(dtype, count), buffer.AsTensor(dtype, count), ReduceOp::kSum,
                 context.stream);
  if (settled) settled();
  context.stream.Synchronize();
  return Judge({Collective::kAllReduce, dtype, ReduceOp::kSum, count, true},
               ExpectAllReduce(dtype, ReduceOp::kSum, place.world_size, count),
               Download(buffer, dtype, 0, static_cast<size_t>(count)));
}

Outcome GroupAggregates(RankContext& context) {
  const DLDataType dtype = ccl::dtype::kFloat32;
  const int64_t count = 33;
  const auto values =
      InputValues(dtype, ReduceOp::kSum, context.rank, context.world_size, 0, count);
  ccl::DeviceBuffer first = Upload(context, dtype, values), second = Upload(context, dtype, values);
  context.backend->GroupStart();
  context.world.AllReduce(first.AsTensor(dtype, count), first.AsTensor(dtype, count),
                          ReduceOp::kSum, context.stream);
  context.world.AllReduce(second.AsTensor(dtype, count), second.AsTensor(dtype, count),
                          ReduceOp::kSum, context.stream);
  context.backend->GroupEnd();
  context.stream.Synchronize();
  const auto expected = ExpectAllReduce(dtype, ReduceOp::kSum, context.world_size, count);
  for (const ccl::DeviceBuffer* buffer : {&first, &second}) {
    const std::string wrong = Judge({Collective::kAllReduce, dtype, ReduceOp::kSum, count, true},
                                    expected, Download(*buffer, dtype, 0, count));
    if (!wrong.empty()) return Fail("two all_reduce in one group: " + wrong);
  }
  return Pass();
}

Outcome SplitHalves(RankContext& context) {
  // Even and odd ranks; keys reverse the order inside each half.
  const int color = context.rank % 2;
  ccl::Communicator half = context.world.Split(color, context.world_size - context.rank);
  Watched watched(*context.watch, half);
  int members = 0, position = 0;
  for (int r = context.world_size - 1; r >= 0; --r) {
    if (r % 2 != color) continue;
    if (r == context.rank) position = members;
    ++members;
  }
  if (!half.valid())
    return Fail("comm_split gave no communicator for color " + std::to_string(color));
  if (half.world_size() != members || half.rank() != position) {
    return Fail("the half of color " + std::to_string(color) + " has this rank as " +
                std::to_string(half.rank()) + " of " + std::to_string(half.world_size()) +
                ", expected " + std::to_string(position) + " of " + std::to_string(members) +
                " (ordered by key)");
  }
  const std::string wrong = SumCheck(context, half, {position, members}, 17);
  if (!wrong.empty()) return Fail("all_reduce on the half: " + wrong);
  half.Destroy();
  return Pass();
}

Outcome MultiDeviceInit(RankContext& context) {
  const auto bootstrap = MakeBootstrap(*context.run_store, context.item_key + "/bootstrap/");
  const ccl::UniqueId id = context.ShareUniqueId(context.item_key, bootstrap);
  const int first_rank = context.rank - context.thread_rank;
  const int first_device = context.device - context.thread_rank;
  const bool host = context.backend->info().device_type == kDLCPU;
  ccl::Communicator comm = context.meeting->OnePerThread(
      context.thread_rank,
      [&] {
        std::vector<int> ranks, devices;
        for (int t = 0; t < context.threads; ++t) {
          ranks.push_back(first_rank + t);
          devices.push_back(host ? 0 : first_device + t);
        }
        return context.backend->CommInitRanks(context.world_size, id, ranks, devices, {},
                                              bootstrap);
      },
      context.options.item_timeout);
  Watched watched(*context.watch, comm);
  context.ActivateDevice();
  const std::string wrong = SumCheck(context, comm, {context.rank, context.world_size}, 9);
  if (!wrong.empty()) return Fail("all_reduce after comm_init_ranks: " + wrong);
  comm.Destroy();
  return Pass(std::to_string(context.threads) + " rank(s) per comm_init_ranks call");
}

Outcome NonBlockingInit(RankContext& context) {
  ccl::CommConfig config;
  config.blocking = false;
  ccl::Communicator comm = context.NewCommunicator(context.item_key, config);
  Watched watched(*context.watch, comm);
  auto settle = [&](const char* what) -> std::string {
    std::string message;
    infiniCclResult_t state = comm.GetAsyncError(&message);
    while (state == infiniCclInProgress) {  // bounded by the item's watch
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      state = comm.GetAsyncError(&message);
    }
    if (state == infiniCclSuccess) return "";
    return std::string(what) + " ended in " + ccl::ResultName(state) + ": " + message;
  };
  if (std::string bad = settle("init"); !bad.empty()) return Fail(bad);
  std::string enqueue_failure;
  const std::string wrong = SumCheck(context, comm, {context.rank, context.world_size}, 5,
                                     [&] { enqueue_failure = settle("all_reduce"); });
  if (!enqueue_failure.empty()) return Fail(enqueue_failure);
  if (!wrong.empty()) return Fail("all_reduce on a non-blocking communicator: " + wrong);
  comm.Destroy();
  return Pass();
}

Outcome CaptureReplays(RankContext& context) {
  const DLDataType dtype = ccl::dtype::kFloat32;
  const int64_t count = 65;
  ccl::Stream stream(context.backend);
  const auto values =
      InputValues(dtype, ReduceOp::kSum, context.rank, context.world_size, 0, count);
  ccl::DeviceBuffer send = Upload(context, dtype, values);
  ccl::DeviceBuffer recv = Upload(context, dtype, {}, count);
  stream.BeginCapture();
  context.world.AllReduce(send.AsTensor(dtype, count), recv.AsTensor(dtype, count), ReduceOp::kSum,
                          stream);
  ccl::Graph graph = stream.EndCapture();
  for (int replay = 0; replay < 2; ++replay) {
    graph.Launch(stream);
    stream.Synchronize();
    const std::string wrong =
        Judge({Collective::kAllReduce, dtype, ReduceOp::kSum, count, false},
              ExpectAllReduce(dtype, ReduceOp::kSum, context.world_size, count),
              Download(recv, dtype, 0, count));
    if (!wrong.empty()) return Fail("replay " + std::to_string(replay + 1) + ": " + wrong);
  }
  return Pass();
}

// Every rank waits for a message nobody sends; another thread aborts the
// communicator; the wait must end.
Outcome AbortUnblocks(RankContext& context) {
  ccl::Communicator comm = context.NewCommunicator(context.item_key);
  const DLDataType dtype = ccl::dtype::kFloat32;
  ccl::DeviceBuffer buffer = Upload(context, dtype, {}, 1);
  std::atomic<bool> entered{false};
  std::thread aborter([&] {
    while (!entered.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // The call has been issued; give it time to block before aborting.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    comm.Abort();
  });
  const auto start = std::chrono::steady_clock::now();
  std::string how = "returned";
  try {
    entered = true;
    comm.Recv(buffer.AsTensor(dtype, 1), (context.rank + 1) % context.world_size, context.stream);
    context.stream.Synchronize();
  } catch (const ccl::Error& error) {
    how = std::string("failed with ") + ccl::ResultName(error.code());
  }
  entered = true;
  aborter.join();
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  return Pass("the blocked recv " + how + " " + std::to_string(waited.count()) +
              " ms after it began");
}

}  // namespace

namespace {

// The runtime items (one rank's device, memory, streams) run in any layout;
// every other item is unsupported when the layout is one the plugin
// declared it cannot serve.
void RefuseLayout(std::vector<Item>& items, const std::string& why) {
  for (Item& item : items) {
    if (item.name.rfind("runtime/", 0) == 0) continue;
    item.needs_world = false;
    item.makes_world = false;
    item.run = [why](RankContext&) { return Unsupported(why); };
  }
}

}  // namespace

std::vector<Item> BuildItems(const ccl::Capabilities& capabilities, int world_size,
                             int threads_per_process) {
  std::vector<Item> items;
  auto add = [&](std::string name, bool needs_world, std::function<Outcome(RankContext&)> run) {
    items.push_back(Item{std::move(name), needs_world, std::move(run)});
  };
  auto declared_or =
      [](bool declared, std::string why,
         std::function<Outcome(RankContext&)> run) -> std::function<Outcome(RankContext&)> {
    if (declared) return run;
    return [why](RankContext&) { return Unsupported(why); };
  };

  add("runtime/device_count", false, DeviceCount);
  add("runtime/memory", false, Memory);
  add("runtime/streams_and_events", false, StreamsAndEvents);
  add("init/unique_id_through_store", false, UniqueIdThroughStore);
  add("init/world", false, WorldInit);
  items.back().makes_world = true;
  add("comm/rank_and_count", true, RankAndCount);
  add("comm/async_error_when_healthy", true, AsyncErrorWhenHealthy);

  const std::vector<Collective> reductions = {Collective::kAllReduce, Collective::kReduce,
                                              Collective::kReduceScatter,
                                              Collective::kReduceScatterV};
  const std::vector<Collective> movements = {
      Collective::kBroadcast, Collective::kAllGather,  Collective::kSend,   Collective::kAllToAll,
      Collective::kAllToAllV, Collective::kAllGatherV, Collective::kGather, Collective::kScatter};
  auto add_collective = [&](Collective collective, bool reduces) {
    if (!capabilities.Implements(collective)) {
      // An optional entry the plugin leaves NULL: one row, not one per type.
      add(std::string(ccl::CollectiveName(collective)), false, [](RankContext&) {
        return Unsupported("not implemented (an optional entry the plugin leaves NULL)");
      });
      return;
    }
    for (DLDataType dtype : AllDataTypes()) {
      if (!reduces) {
        items.push_back(CollectiveItem(collective, dtype, std::nullopt, capabilities, world_size));
        continue;
      }
      for (ReduceOp op : AllReduceOps()) {
        if (!HasReference(dtype, op)) continue;  // average of bools means nothing
        items.push_back(CollectiveItem(collective, dtype, op, capabilities, world_size));
      }
    }
  };
  for (Collective collective : reductions) add_collective(collective, true);
  for (Collective collective : movements) add_collective(collective, false);

  add("barrier", true, BarrierOrders);
  add("group/two_all_reduce", capabilities.group(),
      declared_or(capabilities.group(), "no group entries (group_start/group_end are NULL)",
                  GroupAggregates));
  add("split/even_odd", capabilities.split(),
      declared_or(capabilities.split(), "comm_split is NULL", SplitHalves));
  add("init/multi_device", capabilities.multi_device_init(),
      declared_or(capabilities.multi_device_init(), "comm_init_ranks is NULL", MultiDeviceInit));
  add("init/non_blocking", capabilities.nonblocking(),
      declared_or(capabilities.nonblocking(), "INFINI_CCL_FEATURE_NONBLOCKING not declared",
                  NonBlockingInit));
  add("capture/replay_all_reduce", capabilities.capture(),
      declared_or(capabilities.capture(), "no stream capture entries", CaptureReplays));
  const bool abortable = capabilities.abort() && capabilities.abort_unblocks() && world_size > 1;
  add("abort/unblocks_recv", false,
      declared_or(abortable,
                  !capabilities.abort() ? "comm_abort is NULL"
                  : !capabilities.abort_unblocks()
                      ? "INFINI_CCL_FEATURE_ABORT_UNBLOCKS not declared"
                      : "needs 2 ranks",
                  AbortUnblocks));
  if (capabilities.one_rank_per_process() && threads_per_process > 1) {
    RefuseLayout(items,
                 "the plugin allows one rank per process "
                 "(INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS); this layout has " +
                     std::to_string(threads_per_process) + " ranks per process");
  }
  return items;
}

}  // namespace infini::conformance
