// The nccl plugin's profiler (profiler.h): infiniCclProfiler_v1 towards the
// host, ncclProfiler_v5 towards NCCL. When the host sets its callback
// (tracing on), the plugin names its own library in NCCL_PROFILER_PLUGIN,
// unless the user named a profiler there, so that NCCL's dlopen at the
// first communicator finds this library, already loaded. Tracing off, the
// variable is never set and NCCL loads no profiler: nothing is paid.
#include "profiler.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "communicator.h"
#include "infini/ccl/plugin_profiler_v1.h"
#include "infini/common/one_line.h"
#include "nccl_profiler_v5.h"

namespace infini::ccl::nccl {
namespace {

namespace v5 = profiler_v5;

struct Sink {
  infiniCclProfilerCallback_v1_t callback;
  void* context;
};
std::atomic<const Sink*> g_sink{nullptr};  // a set sink is never freed: a report may hold it

bool Tracing() { return g_sink.load(std::memory_order_acquire) != nullptr; }

// The communicators made while tracing, found by the address of their
// `name` (ProfilerLink), then by the text pointer NCCL gets as commName
// (NoteNcclCommName) until NCCL's profiler init asks for it.
struct Links {
  std::mutex mutex;
  std::unordered_map<const std::string*, infiniCclComm*> by_member;
  std::unordered_map<const char*, infiniCclComm*> by_comm_name;
};
Links& TheLinks() {
  static Links* links = new Links;  // never destroyed: communicators may outlive statics
  return *links;
}

const char kThisLibrary = 0;  // an object of this library, for dladdr

void Say(const std::string& line) {
  const std::string text = "infini_ccl nccl: " + line + "\n";
  (void)!write(STDERR_FILENO, text.data(), text.size());
}

// NCCL loads its profiler at its first communicator, from the library its
// variable names: this one, unless the user chose another (theirs wins).
void PointNcclAtThisLibrary() {
  const char* chosen = std::getenv(v5::kPluginVariable);
  if (chosen != nullptr && *chosen != '\0') {
    Say(std::string(v5::kPluginVariable) + "='" + OneLine(chosen) +
        "' is set (the user's choice of NCCL profiler, kept), so the trace has no NCCL "
        "algorithm, protocol or channel events (unset it to have them)");
    return;
  }
  Dl_info info{};
  char path[PATH_MAX];
  if (dladdr(&kThisLibrary, &info) == 0 || info.dli_fname == nullptr ||
      realpath(info.dli_fname, path) == nullptr) {
    Say("cannot find this plugin's own path (dladdr): the trace has no NCCL events");
    return;
  }
  if (std::strlen(path) > v5::kLongestPath) {
    Say(std::string("this plugin's path '") + OneLine(path) + "' is longer than the " +
        std::to_string(v5::kLongestPath) + " characters NCCL reads from " + v5::kPluginVariable +
        ": the trace has no NCCL events");
    return;
  }
  setenv(v5::kPluginVariable, path, 1);
}

infiniCclResult_t SetCallback(infiniCclProfilerCallback_v1_t callback, void* context) {
  if (callback == nullptr) {
    g_sink.store(nullptr, std::memory_order_release);
    return infiniCclSuccess;
  }
  g_sink.store(new Sink{callback, context}, std::memory_order_release);
  PointNcclAtThisLibrary();
  return infiniCclSuccess;
}

int64_t RealtimeNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The trace's name of NCCL's function (ncclFuncToString's text).
const char* TraceName(const char* func) {
  static constexpr std::pair<std::string_view, const char*> kNames[] = {
      {"AllReduce", "all_reduce"},
      {"AllGather", "all_gather"},
      {"ReduceScatter", "reduce_scatter"},
      {"Broadcast", "broadcast"},
      {"Reduce", "reduce"},
      {"AlltoAll", "all_to_all"},
      {"Gather", "gather"},
      {"Scatter", "scatter"},
      {"Send", "send"},
      {"Recv", "recv"},
      {"SendRecv", "send_recv"}};
  if (func == nullptr) return "nccl_event";
  for (const auto& [nccl_name, name] : kNames) {
    if (nccl_name == func) return name;
  }
  return func;
}

// Bytes of one element of NCCL's type (ncclDatatypeToString's text); 0:
// not known, so the event says no bytes.
uint64_t ElementBytes(const char* datatype) {
  static constexpr std::pair<std::string_view, uint64_t> kSizes[] = {
      {"ncclInt8", 1},    {"ncclUint8", 1},    {"ncclInt32", 4},      {"ncclUint32", 4},
      {"ncclInt64", 8},   {"ncclUint64", 8},   {"ncclFloat16", 2},    {"ncclFloat32", 4},
      {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1}};
  if (datatype == nullptr) return 0;
  for (const auto& [name, bytes] : kSizes) {
    if (name == datatype) return bytes;
  }
  return 0;
}

// NCCL's context for one communicator: ours, when it was found.
struct CommContext {
  infiniCclComm* comm;
};

// One event between NCCL's startEvent and stopEvent. NCCL's strings are
// static (its ...ToString functions), so they are kept as pointers.
struct Event {
  infiniCclComm* comm;
  const char* name;
  const char* algorithm;
  const char* protocol;
  int channels;
  uint64_t bytes;
  int64_t start_ns;
};

v5::Result Init(void** context, uint64_t /*comm_id*/, int* activation_mask, const char* comm_name,
                int /*nodes*/, int /*nranks*/, int /*rank*/, v5::DebugLogger /*log*/) {
  *context = nullptr;
  *activation_mask = 0;  // the host does not trace (the user pointed NCCL here): no events
  if (!Tracing()) return v5::kSuccess;
  infiniCclComm* comm = nullptr;
  if (comm_name != nullptr) {
    Links& links = TheLinks();
    std::lock_guard<std::mutex> lock(links.mutex);
    if (const auto found = links.by_comm_name.find(comm_name); found != links.by_comm_name.end()) {
      comm = found->second;
      links.by_comm_name.erase(found);
    }
  }
  // A communicator without a name is not found: its events count for the
  // process's rank, in no group (docs/tracing.md).
  *context = new CommContext{comm};
  *activation_mask = static_cast<int>(v5::kProfileColl | v5::kProfileP2p);
  return v5::kSuccess;
}

v5::Result StartEvent(void* context, void** handle, v5::EventDescription* description) {
  *handle = nullptr;
  if (context == nullptr || description == nullptr || !Tracing()) return v5::kSuccess;
  infiniCclComm* comm = static_cast<CommContext*>(context)->comm;
  if (description->type == v5::kProfileColl) {
    const v5::CollDescription& coll = description->coll;
    *handle = new Event{comm,        TraceName(coll.func), coll.algo,
                        coll.proto,  coll.nChannels,       coll.count * ElementBytes(coll.datatype),
                        RealtimeNs()};
  } else if (description->type == v5::kProfileP2p) {
    const v5::P2pDescription& p2p = description->p2p;
    *handle = new Event{comm,        TraceName(p2p.func), nullptr,
                        nullptr,     p2p.nChannels,       p2p.count * ElementBytes(p2p.datatype),
                        RealtimeNs()};
  }
  return v5::kSuccess;
}

// NCCL stops a collective's event once it is enqueued (its README): the
// event's span is the enqueue, inside the host's "ccl" span of the call.
v5::Result StopEvent(void* handle) {
  const std::unique_ptr<Event> event(static_cast<Event*>(handle));
  const Sink* sink = g_sink.load(std::memory_order_acquire);
  if (event == nullptr || sink == nullptr) return v5::kSuccess;
  infiniCclProfilerEvent_v1_t reported{};
  reported.struct_size = sizeof reported;
  reported.name = event->name;
  reported.algorithm = event->algorithm;
  reported.protocol = event->protocol;
  reported.channels = event->channels;
  reported.bytes = event->bytes;
  reported.start_ns = event->start_ns;
  reported.end_ns = RealtimeNs();
  reported.comm = event->comm;
  // NCCL numbers each function apart (seqNumber); the host's number of
  // the call in progress matches the "ccl" span.
  reported.seq = INFINI_CCL_PROFILER_SEQ_HOST;
  sink->callback(sink->context, &reported);
  return v5::kSuccess;
}

v5::Result RecordEventState(void* /*handle*/, int /*state*/, void* /*arguments*/) {
  return v5::kSuccess;
}

v5::Result Finalize(void* context) {
  delete static_cast<CommContext*>(context);
  return v5::kSuccess;
}

}  // namespace

ProfilerLink::ProfilerLink(infiniCclComm* owner) noexcept {
  if (!Tracing()) return;
  try {
    Links& links = TheLinks();
    std::lock_guard<std::mutex> lock(links.mutex);
    links.by_member[&owner->name] = owner;
    owner_ = owner;
  } catch (...) {
    // Out of memory: this communicator's events carry no group.
  }
}

ProfilerLink::~ProfilerLink() {
  if (owner_ == nullptr) return;
  Links& links = TheLinks();
  std::lock_guard<std::mutex> lock(links.mutex);
  links.by_member.erase(&owner_->name);
  std::erase_if(links.by_comm_name, [&](const auto& entry) { return entry.second == owner_; });
}

void NoteNcclCommName(const std::string& name) {
  if (!Tracing() || name.empty()) return;
  Links& links = TheLinks();
  std::lock_guard<std::mutex> lock(links.mutex);
  if (const auto found = links.by_member.find(&name); found != links.by_member.end()) {
    links.by_comm_name[name.c_str()] = found->second;
  }
}

}  // namespace infini::ccl::nccl

INFINI_CCL_PLUGIN_EXPORT const infiniCclProfiler_v1_t infiniCclProfiler_v1 = {
    .struct_size = sizeof(infiniCclProfiler_v1_t),
    .version = INFINI_CCL_PROFILER_VERSION_V1,
    .set_callback = &infini::ccl::nccl::SetCallback,
};

// What NCCL looks up in this library once NCCL_PROFILER_PLUGIN names it.
INFINI_CCL_PLUGIN_EXPORT const infini::ccl::nccl::profiler_v5::Profiler ncclProfiler_v5 = {
    .name = "infini_ccl_nccl",
    .init = &infini::ccl::nccl::Init,
    .startEvent = &infini::ccl::nccl::StartEvent,
    .stopEvent = &infini::ccl::nccl::StopEvent,
    .recordEventState = &infini::ccl::nccl::RecordEventState,
    .finalize = &infini::ccl::nccl::Finalize,
};
