#include "flight_recorder.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <thread>

#include "infini/ccl/dtype.h"
#include "infini/rendezvous/store.h"

namespace infini::parallel::internal {
namespace {

// Group names may hold anything but '/': keep the record's fields apart.
std::string Field(std::string text) {
  std::replace(text.begin(), text.end(), '\t', ' ');
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1) {
    fields.push_back(line.substr(start, tab - start));
  }
  fields.push_back(line.substr(start));
  return fields;
}

// One parsed line of a published record.
struct ParsedEntry {
  int global_rank = 0;
  std::string store_key;
  uint64_t sequence = 0;
  std::string op;
  std::string dtype;
  int64_t count = 0;
  std::string state;
  int64_t enqueued_us = 0;
  std::string group_name;
};

bool Parse(const std::string& line, ParsedEntry& entry) {
  const std::vector<std::string> fields = SplitTabs(line);
  if (fields.size() != 11) return false;
  try {
    entry.global_rank = std::stoi(fields[0]);
    entry.store_key = fields[1];
    entry.group_name = fields[2];
    entry.sequence = std::stoull(fields[3]);
    entry.op = fields[4];
    entry.dtype = fields[5];
    entry.count = std::stoll(fields[6]);
    entry.state = fields[7];
    entry.enqueued_us = std::stoll(fields[8]);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

std::string Seconds(int64_t micros) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(micros) / 1e6);
  return text;
}

// "all_reduce #1 (float32 x 4, started 5.1 s ago)"
std::string Where(const ParsedEntry& entry, int64_t now_us) {
  std::string text = entry.op + " #" + std::to_string(entry.sequence) + " (" + entry.dtype + " x " +
                     std::to_string(entry.count) + ", " + entry.state;
  if (entry.state != "done") text += " " + Seconds(now_us - entry.enqueued_us) + " ago";
  return text + ")";
}

std::string RankList(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return text;
}

}  // namespace

const char* FlightStateName(FlightState state) {
  switch (state) {
    case FlightState::kEnqueued:
      return "enqueued";
    case FlightState::kStarted:
      return "started";
    case FlightState::kDone:
      return "done";
    case FlightState::kFailed:
      return "failed";
  }
  return "unknown";
}

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Never destroyed: groups may record during static destruction.
FlightRecorder& FlightRecorder::Instance() {
  static auto* recorder = new FlightRecorder;
  return *recorder;
}

uint32_t FlightRecorder::RegisterGroup(const std::string& store_key, const std::string& name,
                                       const std::vector<int>& /*members*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [position, added] = group_ids_.emplace(store_key, static_cast<uint32_t>(groups_.size()));
  if (added) groups_.push_back({store_key, name});
  return position->second;
}

uint64_t FlightRecorder::Record(uint32_t group, uint64_t sequence, std::string_view op,
                                DLDataType dtype, int64_t count, int global_rank) {
  const int64_t now = WallMicros();
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = next_id_++;
  FlightEntry& entry = ring_[id % ring_.size()];
  entry = FlightEntry{};
  entry.id = id;
  entry.group = group;
  entry.sequence = sequence;
  entry.op = op;
  entry.dtype = dtype;
  entry.count = count;
  entry.global_rank = global_rank;
  entry.enqueued_us = now;
  return id;
}

void FlightRecorder::Update(uint64_t id, FlightState state) {
  if (id == 0) return;
  const int64_t now = WallMicros();
  std::lock_guard<std::mutex> lock(mutex_);
  FlightEntry& entry = ring_[id % ring_.size()];
  if (entry.id != id) return;
  entry.state = state;
  if (state == FlightState::kStarted) {
    entry.started_us = now;
  } else {
    entry.finished_us = now;
  }
}

// One tab-separated line per entry kept:
// global_rank store_key group_name sequence op dtype count state enqueued_us
// started_us finished_us
std::string FlightRecorder::Serialize() const {
  std::vector<FlightEntry> kept;
  std::vector<GroupInfo> groups;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::map<std::pair<int, uint32_t>, const FlightEntry*> newest;
    for (const FlightEntry& entry : ring_) {
      if (entry.id == 0) continue;
      const FlightEntry*& best = newest[{entry.global_rank, entry.group}];
      if (best == nullptr || entry.id > best->id) best = &entry;
      if (entry.state == FlightState::kEnqueued || entry.state == FlightState::kStarted) {
        kept.push_back(entry);
      }
    }
    for (const auto& [key, entry] : newest) {
      if (entry->state == FlightState::kDone || entry->state == FlightState::kFailed) {
        kept.push_back(*entry);
      }
    }
    groups = groups_;
  }
  std::ostringstream text;
  for (const FlightEntry& entry : kept) {
    const GroupInfo& group = groups.at(entry.group);
    text << entry.global_rank << '\t' << Field(group.store_key) << '\t' << Field(group.name) << '\t'
         << entry.sequence << '\t' << entry.op << '\t' << ccl::DataTypeName(entry.dtype) << '\t'
         << entry.count << '\t' << FlightStateName(entry.state) << '\t' << entry.enqueued_us << '\t'
         << entry.started_us << '\t' << entry.finished_us << '\n';
  }
  return text.str();
}

HangReport AnalyseHang(const std::map<int, std::string>& records, const std::string& store_key,
                       const std::string& name, const std::vector<int>& members,
                       int threads_per_process, int64_t now_us) {
  // Each member's newest entry on the group, and its newest on any group.
  std::map<int, ParsedEntry> on_group;
  std::map<int, ParsedEntry> anywhere;
  for (const auto& [proc_rank, text] : records) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      ParsedEntry entry;
      if (!Parse(line, entry)) continue;
      if (entry.store_key == store_key) {
        auto found = on_group.find(entry.global_rank);
        if (found == on_group.end() || entry.sequence > found->second.sequence) {
          on_group[entry.global_rank] = entry;
        }
      }
      auto found = anywhere.find(entry.global_rank);
      if (found == anywhere.end() || entry.enqueued_us > found->second.enqueued_us) {
        anywhere[entry.global_rank] = entry;
      }
    }
  }
  bool any_on_group = false;
  uint64_t frontier = 0;
  for (const auto& [rank, entry] : on_group) {
    frontier = any_on_group ? std::max(frontier, entry.sequence) : entry.sequence;
    any_on_group = true;
  }

  std::vector<int> missing;  // members whose process published nothing
  std::vector<int> waiting;  // members inside the frontier's collective
  int behind = -1;           // lowest sequence below the frontier
  for (int member : members) {
    if (records.count(member / threads_per_process) == 0) {
      missing.push_back(member);
      continue;
    }
    auto entry = on_group.find(member);
    if (entry == on_group.end()) {
      if (behind < 0 || on_group.count(behind) != 0) behind = member;
      continue;
    }
    if (entry->second.sequence < frontier) {
      if (behind < 0 ||
          (on_group.count(behind) != 0 && entry->second.sequence < on_group[behind].sequence)) {
        behind = member;
      }
    } else if (entry->second.state != "done") {
      waiting.push_back(member);
    }
  }
  if (behind < 0 && !missing.empty()) behind = missing.front();

  HangReport report;
  const std::string lead = "infini_ccl flight recorder: ";
  std::vector<int> published;
  for (const auto& [proc_rank, text] : records) published.push_back(proc_rank);
  report.lines.push_back(lead + "group '" + name + "' (global ranks " + RankList(members) +
                         "): records of process ranks " + RankList(published) + " gathered" +
                         (missing.empty() ? "" : ", none from global ranks " + RankList(missing)));
  if (!waiting.empty() && any_on_group) {
    report.lines.push_back(lead + "waiting: global ranks " + RankList(waiting) + " in " +
                           Where(on_group[waiting.front()], now_us));
  }
  if (behind < 0) {
    report.lines.push_back(
        lead + "no rank is behind: every member reached " +
        (any_on_group ? Where(on_group.begin()->second, now_us) : std::string("no collective")) +
        " (ranks that disagree on sizes or types, or a network fault)");
    return report;
  }
  report.behind_global_rank = behind;
  report.behind_proc_rank = behind / threads_per_process;
  std::string where;
  if (std::find(missing.begin(), missing.end(), behind) != missing.end()) {
    where =
        "no record within the gathering time: it is not waiting in any collective past "
        "INFINI_CCL_TIMEOUT_S (stopped, busy outside collectives, or dead)";
  } else {
    auto last = on_group.find(behind);
    where = last == on_group.end() ? "no operation on this group yet"
                                   : "last on this group: " + Where(last->second, now_us);
    auto now = anywhere.find(behind);
    if (now != anywhere.end() && now->second.store_key != store_key) {
      where +=
          "; newest: " + Where(now->second, now_us) + " on group '" + now->second.group_name + "'";
    }
  }
  if (any_on_group) {
    where += "; the others are at #" + std::to_string(frontier);
  }
  report.lines.push_back(lead + "behind: process rank " + std::to_string(report.behind_proc_rank) +
                         " (global rank " + std::to_string(behind) + ") on group '" + name +
                         "': " + where);
  return report;
}

void GatherHangReport(rendezvous::Store& store, const HangScene& scene,
                      std::chrono::milliseconds window,
                      const std::function<void(const std::string&)>& print) {
  const std::string prefix = "flight/";
  store.Set(prefix + std::to_string(scene.proc_rank), FlightRecorder::Instance().Serialize());
  const bool reporter = store.Add(prefix + "reporter", 1) == 1;
  const auto deadline = std::chrono::steady_clock::now() + window;
  constexpr auto kPoll = std::chrono::milliseconds(50);
  if (!reporter) {
    // The reporter prints; this process only waits so that its own exit
    // does not make the launcher stop the reporter before it has.
    const auto give_up = deadline + std::chrono::seconds(5);
    while (!store.Check({prefix + "reported"}) && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(kPoll);
    }
    if (store.Check({prefix + "reported"})) {
      print("infini_ccl flight recorder: the hang report was printed by process rank " +
            store.Get(prefix + "reported"));
    }
    return;
  }
  std::set<int> processes;
  for (int member : scene.members) processes.insert(member / scene.threads_per_process);
  std::map<int, std::string> records;
  for (;;) {
    for (int process : processes) {
      const std::string key = prefix + std::to_string(process);
      if (records.count(process) == 0 && store.Check({key})) records[process] = store.Get(key);
    }
    if (records.size() == processes.size() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(kPoll);
  }
  HangReport report = AnalyseHang(records, scene.store_key, scene.name, scene.members,
                                  scene.threads_per_process, WallMicros());
  for (const std::string& line : report.lines) print(line);
  store.Set(prefix + "reported", std::to_string(scene.proc_rank));
}

}  // namespace infini::parallel::internal
