// The process's flight recorder (model: PyTorch's NCCL flight recorder and
// its analyzer). Every operation of every process group is recorded in a
// ring of the last kFlightRecorderEntries (group, sequence number, op, dtype,
// count, state, times). Recording copies a few integers and a static op name
// (ccl's name of the collective) under a mutex: no string is built on the
// hot path.
//
// When the watchdog fires, the process publishes its records through the
// run's store, gathers the other members' for a short while and analyses
// them: which rank is behind on the group (lowest sequence number, or no
// record at all), where it is, and which ranks wait for it.
#pragma once

#include <dlpack/dlpack.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace infini::rendezvous {
class Store;
}

namespace infini::parallel::internal {

inline constexpr size_t kFlightRecorderEntries = 2048;

enum class FlightState : uint8_t { kEnqueued, kStarted, kDone, kFailed };
const char* FlightStateName(FlightState state);

struct FlightEntry {
  uint64_t id = 0;  // 0: empty slot
  uint32_t group = 0;
  uint64_t sequence = 0;
  // ccl::CollectiveName's text, or parallel's own (work_state.h): static.
  std::string_view op;
  DLDataType dtype{};
  int64_t count = 0;
  int global_rank = 0;
  FlightState state = FlightState::kEnqueued;
  int64_t enqueued_us = 0;  // wall clock, microseconds since the epoch
  int64_t started_us = 0;
  int64_t finished_us = 0;
};

class FlightRecorder {
 public:
  static FlightRecorder& Instance();

  // Interns a group by its store key (the same on every member); once per
  // group, off the hot path.
  uint32_t RegisterGroup(const std::string& store_key, const std::string& name,
                         const std::vector<int>& members);
  // Returns the entry's id for Update.
  uint64_t Record(uint32_t group, uint64_t sequence, std::string_view op, DLDataType dtype,
                  int64_t count, int global_rank);
  // No-op when the entry was already overwritten by newer ones.
  void Update(uint64_t id, FlightState state);

  // For each (global rank, group) in the ring: its newest entry, and every
  // entry not yet done. One line each (see flight_recorder.cc).
  std::string Serialize() const;

 private:
  struct GroupInfo {
    std::string store_key;
    std::string name;
  };
  mutable std::mutex mutex_;
  std::vector<FlightEntry> ring_ = std::vector<FlightEntry>(kFlightRecorderEntries);
  uint64_t next_id_ = 1;
  std::vector<GroupInfo> groups_;
  std::map<std::string, uint32_t> group_ids_;
};

// One rank's position on a group, read back from a published record.
struct RankPosition {
  int global_rank = 0;
  bool has_entry = false;
  uint64_t sequence = 0;
  std::string op;
  std::string dtype;
  int64_t count = 0;
  std::string state;
  int64_t enqueued_us = 0;
  // The newest entry of this rank on any group: where it is now.
  std::string elsewhere;
};

// What one hang report says; built from the published records.
struct HangReport {
  std::vector<std::string> lines;  // one finding per line
  int behind_global_rank = -1;     // -1: nobody is behind
  int behind_proc_rank = -1;
};

// Analyses `records` (process rank → Serialize() text of that process) for
// the group `store_key` (named `name`, members `members` in group order).
// `threads_per_process` maps global ranks to process ranks.
HangReport AnalyseHang(const std::map<int, std::string>& records, const std::string& store_key,
                       const std::string& name, const std::vector<int>& members,
                       int threads_per_process, int64_t now_us);

int64_t WallMicros();

// How long a firing process waits for the other members' records.
inline constexpr std::chrono::seconds kFlightGatherWindow{3};

// What the watchdog knows of the group whose operation is overdue.
struct HangScene {
  std::string store_key;  // the group's identity on every member
  std::string name;
  std::vector<int> members;
  int threads_per_process = 1;
  int proc_rank = 0;  // this process
};

// Publishes this process's record under "flight/<proc_rank>" of `store`
// (the run's namespace), gathers the members' for up to `window`, and
// prints the report's lines if this process is the run's one reporter (the
// first to claim "flight/reporter"), then sets "flight/reported". Another
// process waits for that key (at most `window` + 5 s), so that its exit
// cannot make the launcher stop the reporter mid-report, and prints one
// line naming the reporter.
void GatherHangReport(rendezvous::Store& store, const HangScene& scene,
                      std::chrono::milliseconds window,
                      const std::function<void(const std::string&)>& print);

}  // namespace infini::parallel::internal
