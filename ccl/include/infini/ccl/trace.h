// The communication trace's entry points for the layers above ccl/
// (docs/tracing.md). ccl::Communicator records its own calls; parallel/
// names communicators, adds its group-level spans and the clock offset.
// Tracing is on when INFINI_CCL_TRACE_DIR is set at load; off, every entry
// below costs a caller one relaxed load of Enabled().
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infini::ccl {

class Communicator;

namespace trace {

namespace detail {
extern std::atomic<bool> g_enabled;
}  // namespace detail

inline bool Enabled() noexcept { return detail::g_enabled.load(std::memory_order_relaxed); }

// The clock events are stamped with: system clock, ns since the Unix epoch.
int64_t NowNs() noexcept;

// Where a span comes from (trace_format.h's categories). kDevice and
// kPlugin are ccl/'s own: a call's device span, a backend's reported event.
// kWatchdog and kRecovery are parallel/'s fault handling (RecordFault).
enum class Category : uint8_t {
  kCcl,
  kGroup,
  kWait,
  kBucket,
  kDevice,
  kPlugin,
  kWatchdog,
  kRecovery
};

// The events of `comm`'s calls carry `group` and count for `global_rank`
// (without a label: the group is unnamed and the rank is RANK's, else the
// communicator's).
void LabelCommunicator(const Communicator& comm, std::string_view group, int global_rank);

// A span of `global_rank`'s: `name` is static text ("all_reduce",
// "bucket"); `seq` the group's number for it (a bucket's index).
void RecordSpan(int global_rank, Category category, const char* name, std::string_view group,
                int64_t seq, uint64_t bytes, int64_t begin_ns, int64_t end_ns);

// What a person wants to know of a fault-handling event (the rank lost, the
// new world size ...): the members of one JSON object, in the order added.
class Facts {
 public:
  Facts& Add(std::string_view name, int64_t value);
  Facts& Add(std::string_view name, std::string_view text);
  Facts& Add(std::string_view name, const std::vector<int>& values);
  // "{...}"
  std::string Json() const { return "{" + members_ + "}"; }

 private:
  void Name(std::string_view name);
  std::string members_;
};

// A watchdog or recovery event of `lane_rank`'s (the rank infini_run
// started it as: its lane stays when a recovery renumbers the world): a
// point when begin_ns == end_ns, else a span. Rare, so its facts are text;
// callers build them only when Enabled().
void RecordFault(int lane_rank, Category category, const char* name, std::string_view group,
                 const Facts& facts, int64_t begin_ns, int64_t end_ns);

// Writes what the rings hold now, from the calling thread (the watchdog's,
// before std::_Exit skips the recorder's exit).
void FlushNow();

// `global_rank`'s clock offset to the store's host (its clock = ours +
// offset_ns), from `rounds` round trips, the best of which took rtt_ns
// (-1: not measured, offset 0 assumed).
void RecordClockOffset(int global_rank, int64_t offset_ns, int64_t rtt_ns, int rounds);

}  // namespace trace
}  // namespace infini::ccl
