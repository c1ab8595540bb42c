// The nccl plugin's infiniCclProfiler_v1 (docs/tracing.md, "Events a
// plugin reports"): while the host traces, the plugin is also NCCL's
// profiler plugin (ncclProfiler_v5, nccl_profiler_v5.h), and each of NCCL's
// collective and point-to-point events becomes a host "plugin" event with
// NCCL's algorithm, protocol and channels, on the communicator it ran on.
#pragma once

#include <string>

struct infiniCclComm;

namespace infini::ccl::nccl {

// A member of infiniCclComm (the last): while the host traces, it lets the
// profiler's init find the communicator NCCL is making, by the name NCCL
// was given (ToNcclConfig's commName, the communicator's own `name`).
class ProfilerLink {
 public:
  explicit ProfilerLink(infiniCclComm* owner) noexcept;
  ~ProfilerLink();
  ProfilerLink(const ProfilerLink&) = delete;
  ProfilerLink& operator=(const ProfilerLink&) = delete;

 private:
  infiniCclComm* owner_ = nullptr;  // null: not linked (the host does not trace)
};

// ToNcclConfig's hook: `name` is a communicator's `name` member, whose
// c_str() NCCL is about to receive as commName. Nothing when not tracing.
void NoteNcclCommName(const std::string& name);

}  // namespace infini::ccl::nccl
