// The communication trace's entry points for the layers above ccl/
// (docs/tracing.md). ccl::Communicator records its own calls; parallel/
// names communicators, adds its group-level spans and the clock offset.
// Tracing is on when INFINI_CCL_TRACE_DIR is set at load; off, every entry
// below costs a caller one relaxed load of Enabled().
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

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
enum class Category : uint8_t { kCcl, kGroup, kWait, kBucket, kDevice, kPlugin };

// The events of `comm`'s calls carry `group` and count for `global_rank`
// (without a label: the group is unnamed and the rank is RANK's, else the
// communicator's).
void LabelCommunicator(const Communicator& comm, std::string_view group, int global_rank);

// A span of `global_rank`'s: `name` is static text ("all_reduce",
// "bucket"); `seq` the group's number for it (a bucket's index).
void RecordSpan(int global_rank, Category category, const char* name, std::string_view group,
                int64_t seq, uint64_t bytes, int64_t begin_ns, int64_t end_ns);

// `global_rank`'s clock offset to the store's host (its clock = ours +
// offset_ns), from `rounds` round trips, the best of which took rtt_ns
// (-1: not measured, offset 0 assumed).
void RecordClockOffset(int global_rank, int64_t offset_ns, int64_t rtt_ns, int rounds);

}  // namespace trace
}  // namespace infini::ccl
