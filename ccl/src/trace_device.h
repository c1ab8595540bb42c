// Device start/end of the collectives a Communicator enqueues on a stream
// (docs/tracing.md, "Device spans"): an event pair from the plugin's device
// runtime around the enqueue, read by the recorder's thread once the end
// event has completed, so the issuing thread never waits for the device.
// The device times are placed on the host clock through an anchor event
// that the recorder records on a stream of its own, idle but for anchors:
// it runs when it is enqueued, at a host time we read.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl {
class Backend;
}

namespace infini::ccl::internal {

// Whether the calling thread has a GroupStart of `backend` open and the
// plugin groups (backend.cc): its work is then enqueued at GroupEnd.
bool GroupIsOpen(const Backend& backend);
// Throws Error(infiniCclUnsupported) naming `call` when the calling thread
// has a GroupStart of `backend` open and the plugin has no group entries.
void RefusePointToPointInHostGroup(const Backend& backend, std::string_view call);

// Where a call enqueues: what a device sample needs of it.
struct TraceStream {
  const infiniCclPlugin_t* plugin = nullptr;
  infiniCclStream_t stream = nullptr;
  int device = 0;            // the communicator's device index
  bool host_backend = true;  // the backend's device is the CPU: its calls run inline
  bool group_open = false;   // inside GroupStart/GroupEnd: the work is enqueued at GroupEnd
};

struct DeviceAnchor;
struct DevicePool;

// One sampled call in flight: its events, until the recorder reads them.
struct DeviceSample {
  DevicePool* pool = nullptr;  // its device's: lives as long as the process
  std::shared_ptr<DeviceAnchor> anchor;
  infiniCclEvent_t start = nullptr;
  infiniCclEvent_t end = nullptr;
  bool in_flight = false;  // counted against the bound on samples in flight
};

// Every how many eligible calls one is sampled (INFINI_CCL_TRACE_DEVICE_EVERY;
// 0: none). Unset: every call on a device backend, none on a host one.
int DeviceSampleEvery(bool host_backend);

// Records the anchor (when due) and the start event before the enqueue;
// nullptr when this call is not sampled or an event cannot be had.
std::unique_ptr<DeviceSample> StartDeviceSample(const TraceStream& where);
// Records the end event after the enqueue; false (and the sample released)
// when it cannot be recorded.
bool EndDeviceSample(DeviceSample& sample, infiniCclStream_t stream);

// The recorder's thread: whether the sample's end event has completed;
// then its device begin/end on the host clock, or `*unreadable` when the
// plugin cannot give them (the sample is then dropped).
enum class SampleState { kPending, kRead, kUnreadable };
SampleState ReadDeviceSample(const DeviceSample& sample, int64_t* begin_ns, int64_t* end_ns);
// Gives the sample's events back to its device's pool.
void ReleaseDeviceSample(DeviceSample& sample);
// An unreadable sample's events are left, neither reused nor destroyed: the
// likely cause is a stream being captured into a graph, whose replays would
// record them again (a pooled event would then time another call wrongly,
// a destroyed one would be a graph's dangling node).
void AbandonDeviceSample(DeviceSample& sample);

}  // namespace infini::ccl::internal
