// The items that are not one collective: the device runtime, the unique id
// and init, the communicator's queries, barrier, group, split, multi-device
// and non-blocking init, capture and abort.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/plugin_table.h"
#include "suite_items.h"

namespace infini::conformance::internal {

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
  const std::string wrong = Judge({Collective::kBroadcast, dtype, std::nullopt, 1000, false}, 1,
                                  values, Download(buffer, dtype, 0, values.size()));
  if (!wrong.empty()) return Fail("host → device → host copy: " + wrong);
  context.backend->MemsetAsync(buffer.data(), 0, 4000);
  ccl::Stream::Default(context.backend).Synchronize();
  const std::vector<double> zeros(1000, 0);
  const std::string not_zero = Judge({Collective::kBroadcast, dtype, std::nullopt, 1000, false}, 1,
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

namespace {

// How long a stream held by a flag must stay held, and how long a release
// may take to show.
constexpr std::chrono::milliseconds kHeld{300};
constexpr std::chrono::seconds kReleaseBound{10};

// Writes `value` to `flag` after `delay`, from another thread, as a staged
// communicator's worker does; joined by the destructor.
class LateWrite {
 public:
  LateWrite(uint32_t* flag, uint32_t value, std::chrono::milliseconds delay)
      : thread_([flag, value, delay] {
          std::this_thread::sleep_for(delay);
          __atomic_store_n(flag, value, __ATOMIC_RELEASE);
        }) {}
  ~LateWrite() { thread_.join(); }
  LateWrite(const LateWrite&) = delete;
  LateWrite& operator=(const LateWrite&) = delete;

 private:
  std::thread thread_;
};

// Milliseconds until `stream`'s work is done, or -1 after kReleaseBound
// (a stream that never lets go: the waiting thread is left behind).
int64_t MillisecondsToDrain(const std::shared_ptr<ccl::Stream>& stream) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  const auto start = std::chrono::steady_clock::now();
  std::thread([stream, done] {
    stream->Synchronize();
    done->store(true);
  }).detach();
  while (!done->load()) {
    if (std::chrono::steady_clock::now() - start > kReleaseBound) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

}  // namespace

// Host flags, which a staged communicator's proxied calls stand on: work
// behind stream_wait_host_flag runs only once the host has written the
// value (or one after it, counting cyclically past 2^32), and a value
// already reached holds nothing.
Outcome HostFlags(RankContext& context) {
  const infiniCclPlugin_t& plugin = ccl::PluginTable(*context.backend);
  if (plugin.host_flag_create == nullptr) {
    return Unsupported("no host flags (optional: staged calls then return after their host part)");
  }
  context.ActivateDevice();
  // Shared with a thread that may outlive this item (MillisecondsToDrain).
  const auto stream = std::make_shared<ccl::Stream>(context.backend);
  uint32_t* flag = nullptr;
  context.backend->Check(plugin.host_flag_create(&flag), "host_flag_create");
  if (flag == nullptr) return Fail("host_flag_create succeeded and gave no flag");
  if (*flag != 0) return Fail("a new flag holds " + std::to_string(*flag) + ", expected 0");
  const DLDataType dtype = ccl::dtype::kInt32;
  ccl::DeviceBuffer buffer = Upload(context, dtype, std::vector<double>(4, 7));
  // value: what the stream waits for; from, to: the flag before and after
  // the late write.
  const auto held = [&](uint32_t from, uint32_t value, uint32_t to, int fill) {
    __atomic_store_n(flag, from, __ATOMIC_RELEASE);
    context.backend->Check(plugin.stream_wait_host_flag(stream->handle(), flag, value),
                           "stream_wait_host_flag");
    context.backend->MemsetAsync(buffer.data(), fill, 4 * sizeof(int32_t), *stream);
    int64_t ms;
    {
      LateWrite write(flag, to, kHeld);
      ms = MillisecondsToDrain(stream);
    }
    const std::string waited = "waiting for " + std::to_string(value) + " with the flag at " +
                               std::to_string(from) + " then " + std::to_string(to);
    if (ms < 0) return waited + ": the stream was not released";
    if (ms < kHeld.count() * 2 / 3) {
      return waited + ": the work behind the wait ran after " + std::to_string(ms) +
             " ms, before the flag was written";
    }
    const std::string filled = Judge({Collective::kBroadcast, dtype, std::nullopt, 4, false}, 1,
                                     std::vector<double>(4, fill * (1 + 256 + 65536 + 16777216.0)),
                                     Download(buffer, dtype, 0, 4));
    return filled.empty() ? std::string() : waited + ": " + filled;
  };
  const auto not_held = [&](uint32_t at, uint32_t value) {
    __atomic_store_n(flag, at, __ATOMIC_RELEASE);
    context.backend->Check(plugin.stream_wait_host_flag(stream->handle(), flag, value),
                           "stream_wait_host_flag");
    const int64_t ms = MillisecondsToDrain(stream);
    if (ms >= 0) return std::string();
    return "waiting for " + std::to_string(value) + " with the flag at " + std::to_string(at) +
           " already: the stream was held";
  };
  // In turn, up to the first problem: a stream left held makes the rest moot.
  std::string wrong = held(0, 1, 1, 1);
  if (wrong.empty()) wrong = held(0xfffffff0u, 5, 6, 2);  // across the wrap
  if (wrong.empty()) wrong = not_held(6, 6);
  if (wrong.empty()) wrong = not_held(6, 0xfffffff0u);  // behind, across the wrap
  if (wrong.empty()) wrong = not_held(9, 3);
  if (!wrong.empty()) return Fail(wrong);  // the flag stays: a stream may still wait on it
  context.backend->Check(plugin.host_flag_destroy(flag), "host_flag_destroy");
  return Pass();
}

// The stream's own signal to the host, which a staged communicator's
// worker polls instead of calling the device runtime: stream_write_host_flag
// stores its value only after the work ahead of it (held behind a host flag
// for kHeld), by itself (nothing synchronizes the stream meanwhile), and the
// bytes that work copied to host memory are there once the flag is.
Outcome HostFlagWrites(RankContext& context) {
  const infiniCclPlugin_t& plugin = ccl::PluginTable(*context.backend);
  if (plugin.stream_write_host_flag == nullptr) {
    return Unsupported(
        "no stream_write_host_flag (optional: staged calls then return after their host part)");
  }
  context.ActivateDevice();
  const auto stream = std::make_shared<ccl::Stream>(context.backend);
  uint32_t* gate = nullptr;
  uint32_t* signal = nullptr;
  context.backend->Check(plugin.host_flag_create(&gate), "host_flag_create");
  context.backend->Check(plugin.host_flag_create(&signal), "host_flag_create");
  if (gate == nullptr || signal == nullptr)
    return Fail("host_flag_create succeeded and gave no flag");
  const DLDataType dtype = ccl::dtype::kInt32;
  constexpr size_t kCount = size_t{1} << 20;  // 4 MiB: a copy that takes a moment
  const std::vector<double> values = InputValues(dtype, std::nullopt, context.rank, 1, 0, kCount);
  ccl::DeviceBuffer buffer = Upload(context, dtype, values);
  // Left behind on a failure, with the flags: the stream may still write them.
  auto owned = std::make_unique<std::vector<int32_t>>(kCount, -1);
  std::vector<int32_t>& host = *owned;
  const size_t bytes = kCount * sizeof(int32_t);
  // Staging buffers are registered where the plugin can: so is this one.
  const bool registered = plugin.host_register != nullptr &&
                          plugin.host_register(host.data(), bytes) == infiniCclSuccess;
  constexpr uint32_t kValue = 7;
  int64_t ms = -1;
  {
    LateWrite open(gate, 1, kHeld);
    const auto start = std::chrono::steady_clock::now();
    context.backend->Check(plugin.stream_wait_host_flag(stream->handle(), gate, 1),
                           "stream_wait_host_flag");
    context.backend->MemcpyAsync(host.data(), buffer.data(), bytes, infiniCclMemcpyDeviceToHost,
                                 *stream);
    context.backend->Check(plugin.stream_write_host_flag(stream->handle(), signal, kValue),
                           "stream_write_host_flag");
    while (std::chrono::steady_clock::now() - start < kReleaseBound) {
      if (__atomic_load_n(signal, __ATOMIC_ACQUIRE) == kValue) {
        ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - start)
                 .count();
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  std::string wrong;
  if (ms < 0) {
    wrong = "the flag did not reach " + std::to_string(kValue) +
            " within 10 s while nothing synchronized the stream";
  } else if (ms < kHeld.count() * 2 / 3) {
    wrong = "the flag was written after " + std::to_string(ms) + " ms, before the work ahead of " +
            "it (held " + std::to_string(kHeld.count()) + " ms) ran";
  } else {
    const std::string copied = Judge({Collective::kBroadcast, dtype, std::nullopt, kCount, false},
                                     1, values, std::vector<double>(host.begin(), host.end()));
    if (!copied.empty()) wrong = "the bytes copied to the host before the flag: " + copied;
  }
  if (!wrong.empty()) {
    owned.release();
    return Fail(wrong);
  }
  stream->Synchronize();
  if (registered) plugin.host_unregister(host.data());
  context.backend->Check(plugin.host_flag_destroy(gate), "host_flag_destroy");
  context.backend->Check(plugin.host_flag_destroy(signal), "host_flag_destroy");
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
  const infiniCclPlugin_t& plugin = ccl::PluginTable(*context.backend);  // the entries themselves
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
  return Pass(context.backend->capabilities().Implements(Collective::kBarrier)
                  ? "plugin barrier"
                  : "host fallback (all_reduce)");
}

std::string SumCheck(RankContext& context, const ccl::Communicator& comm, Position place,
                     int64_t count, const std::function<void()>& settled) {
  const DLDataType dtype = ccl::dtype::kFloat32;
  const std::vector<double> values =
      InputValues(dtype, ReduceOp::kSum, place.rank, place.world_size, 0, count);
  ccl::DeviceBuffer buffer = Upload(context, dtype, values);
  comm.AllReduce(buffer.AsTensor(dtype, count), buffer.AsTensor(dtype, count), ReduceOp::kSum,
                 context.stream);
  if (settled) settled();
  context.stream.Synchronize();
  return Judge({Collective::kAllReduce, dtype, ReduceOp::kSum, count, true}, place.world_size,
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
    const std::string wrong =
        Judge({Collective::kAllReduce, dtype, ReduceOp::kSum, count, true}, context.world_size,
              expected, Download(*buffer, dtype, 0, count));
    if (!wrong.empty()) return Fail("two all_reduce in one group: " + wrong);
  }
  return Pass();
}

// comm_register/comm_deregister (or, `window`, the collective
// comm_window_register/comm_window_deregister with symmetric memory), where
// declared: an all_reduce on a registered buffer is right, and both calls
// succeed (declared but broken is a FAIL, not a silent slow path).
Outcome RegisteredAllReduce(RankContext& context, bool window) {
  const char* const register_call = window ? "comm_window_register" : "comm_register";
  const char* const deregister_call = window ? "comm_window_deregister" : "comm_deregister";
  const DLDataType dtype = ccl::dtype::kFloat32;
  const int64_t count = 33;
  const auto values =
      InputValues(dtype, ReduceOp::kSum, context.rank, context.world_size, 0, count);
  ccl::DeviceBuffer buffer = Upload(context, dtype, values);
  ccl::BufferRegistration registration;
  try {
    registration = window ? context.world.RegisterWindow(buffer.data(), buffer.bytes())
                          : context.world.Register(buffer.data(), buffer.bytes());
  } catch (const std::exception& error) {
    return Fail(std::string(register_call) + " of a device buffer failed: " + error.what());
  }
  context.world.AllReduce(buffer.AsTensor(dtype, count), buffer.AsTensor(dtype, count),
                          ReduceOp::kSum, context.stream);
  context.stream.Synchronize();
  const std::string wrong =
      Judge({Collective::kAllReduce, dtype, ReduceOp::kSum, count, true}, context.world_size,
            ExpectAllReduce(dtype, ReduceOp::kSum, context.world_size, count),
            Download(buffer, dtype, 0, count));
  if (!wrong.empty()) return Fail("all_reduce on a registered buffer: " + wrong);
  try {
    registration.Deregister();
  } catch (const std::exception& error) {
    return Fail(std::string(deregister_call) + " failed: " + error.what());
  }
  return Pass();
}

std::string CheckMembers(RankContext& context, const ccl::Communicator& comm, Position place,
                         const std::vector<int>& expected) {
  const DLDataType dtype = ccl::dtype::kInt32;
  const auto members = static_cast<int64_t>(expected.size());
  ccl::DeviceBuffer own = Upload(context, dtype, {static_cast<double>(context.rank)});
  ccl::DeviceBuffer all = Upload(context, dtype, {}, expected.size());
  comm.AllGather(own.AsTensor(dtype, 1), all.AsTensor(dtype, members), context.stream);
  AwaitCompletion(context, 0);
  const std::vector<double> said = Download(all, dtype, 0, expected.size());
  std::string who, want;
  bool right = said[static_cast<size_t>(place.rank)] == context.rank;
  for (size_t index = 0; index < expected.size(); ++index) {
    right = right && said[index] == expected[index];
    who += (index == 0 ? "" : " ") + std::to_string(static_cast<int64_t>(said[index]));
    want += (index == 0 ? "" : " ") + std::to_string(expected[index]);
  }
  if (right) return "";
  return "its members, in rank order, say they are world ranks " + who + "; expected " + want;
}

// Colors that are not 0..k-1 (7 and 3, alternating) and distinct keys that
// permute the ranks inside each color (from 3 ranks on, ranks 0 and 2 swap);
// the members exchange their world ranks through the new communicator, so
// a split that ignores the key or mixes colors shows whatever the plugin
// says of itself.
Outcome SplitPermutedKeys(RankContext& context) {
  auto color_of = [](int rank) { return rank % 2 == 0 ? 7 : 3; };
  auto key_of = [](int rank) { return ((rank * 7 + 3) % 5) * 1'000'000 + rank; };
  const int color = color_of(context.rank);
  std::vector<std::pair<int, int>> by_key;  // (key, world rank): ties by rank
  for (int rank = 0; rank < context.world_size; ++rank) {
    if (color_of(rank) == color) by_key.emplace_back(key_of(rank), rank);
  }
  std::sort(by_key.begin(), by_key.end());
  std::vector<int> members;
  int position = 0;
  for (const auto& [key, rank] : by_key) {
    if (rank == context.rank) position = static_cast<int>(members.size());
    members.push_back(rank);
  }
  ccl::Communicator part = context.world.Split(color, key_of(context.rank));
  Watched watched(*context.watch, part);
  const auto count = static_cast<int>(members.size());
  if (!part.valid()) {
    return Fail("comm_split gave no communicator for color " + std::to_string(color));
  }
  if (part.world_size() != count || part.rank() != position) {
    return Fail("the part of color " + std::to_string(color) + " has this rank as " +
                std::to_string(part.rank()) + " of " + std::to_string(part.world_size()) +
                ", expected " + std::to_string(position) + " of " + std::to_string(count) +
                " (ordered by key)");
  }
  if (std::string wrong = CheckMembers(context, part, {position, count}, members); !wrong.empty()) {
    return Fail("the part of color " + std::to_string(color) + ": " + wrong);
  }
  const std::string wrong = SumCheck(context, part, {position, count}, 17);
  if (!wrong.empty()) return Fail("all_reduce on the part: " + wrong);
  part.Destroy();
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
        Judge({Collective::kAllReduce, dtype, ReduceOp::kSum, count, false}, context.world_size,
              ExpectAllReduce(dtype, ReduceOp::kSum, context.world_size, count),
              Download(recv, dtype, 0, count));
    if (!wrong.empty()) return Fail("replay " + std::to_string(replay + 1) + ": " + wrong);
  }
  return Pass();
}

// Every rank waits for a message nobody sends; another thread aborts the
// communicator; the wait must end, and a call that was blocked until the
// abort must not report success (its message never came).
Outcome AbortUnblocks(RankContext& context) {
  ccl::Communicator comm = context.NewCommunicator(context.item_key);
  const DLDataType dtype = ccl::dtype::kFloat32;
  ccl::DeviceBuffer buffer = Upload(context, dtype, {}, 1);
  std::atomic<bool> entered{false};
  std::atomic<bool> aborted{false};
  std::thread aborter([&] {
    while (!entered.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // The call has been issued; give it time to block before aborting.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    aborted = true;
    comm.Abort();
  });
  const auto start = std::chrono::steady_clock::now();
  std::string how = "returned";
  bool returned_after_abort = false;
  try {
    entered = true;
    comm.Recv(buffer.AsTensor(dtype, 1), (context.rank + 1) % context.world_size, context.stream);
    // A blocking backend returns only once the message came or the call
    // was ended; an enqueueing one (NCCL) returns at once.
    returned_after_abort = aborted.load();
    context.stream.Synchronize();
  } catch (const ccl::Error& error) {
    how = std::string("failed with ") + ccl::ResultName(error.code());
  }
  entered = true;
  aborter.join();
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  if (how == "returned" && returned_after_abort && !context.watch->fired()) {
    return Fail("a recv from a peer that never sent, blocked until comm_abort, returned success");
  }
  return Pass("the blocked recv " + how + " " + std::to_string(waited.count()) +
              " ms after it began");
}

}  // namespace infini::conformance::internal
