#include "infini/launch/trace_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "infini/common/one_line.h"
#include "infini/common/trace_format.h"
#include "infini/launch/options.h"
#include "infini/rendezvous/prefix_store.h"
#include "infini/rendezvous/tcp_store.h"

namespace infini::launch {
namespace {

constexpr std::chrono::seconds kAnswererConnectTimeout{10};
// How long one wait for the next question lasts: the answerer's stop latency.
constexpr std::chrono::milliseconds kQuestionPoll{100};

[[noreturn]] void RefuseFolder(const std::string& path, const std::string& why) {
  throw UsageError("--trace_dir='" + OneLine(path) + "': expected a folder infini_run can write (" +
                   why + ")");
}

void MakeFolders(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      RefuseFolder(path, "mkdir " + prefix + ": " + std::strerror(errno));
    }
    if (slash == std::string::npos) return;
  }
}

bool IsTraceFile(const std::string& name) {
  const auto ends_with = [&](const char* tail) {
    const size_t length = std::strlen(tail);
    return name.size() >= length && name.compare(name.size() - length, length, tail) == 0;
  };
  return (name.rfind("rank", 0) == 0 && ends_with(".jsonl")) ||
         (name.rfind("metrics_rank", 0) == 0 && ends_with(".json")) ||
         name == trace_format::kMergedFileName;
}

std::vector<std::string> FolderEntries(const std::string& folder) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(folder.c_str())) {
    while (const dirent* entry = readdir(dir)) names.emplace_back(entry->d_name);
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A member of a trace line's object. Integers are written as numbers; one
// written as a string still reads, anything else is `fallback`.
int64_t Int(const nlohmann::json& fields, const char* name, int64_t fallback = 0) {
  const auto found = fields.find(name);
  if (found == fields.end()) return fallback;
  if (found->is_number_integer()) return found->get<int64_t>();
  if (found->is_number()) return static_cast<int64_t>(found->get<double>());
  if (found->is_string() && !found->get_ref<const std::string&>().empty()) {
    return std::strtoll(found->get_ref<const std::string&>().c_str(), nullptr, 10);
  }
  return fallback;
}

std::string Text(const nlohmann::json& fields, const char* name) {
  const auto found = fields.find(name);
  return found != fields.end() && found->is_string() ? found->get<std::string>() : std::string();
}

double Real(const nlohmann::json& fields, const char* name) {
  const auto found = fields.find(name);
  return found != fields.end() && found->is_number() ? found->get<double>() : 0.0;
}

// A file's text as one JSON object; an empty object when it is not one (a
// line cut by a kill, a file from something else).
nlohmann::json ParseObject(const std::string& text) {
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_object() ? parsed : nlohmann::json::object();
}

}  // namespace

std::string AbsoluteTraceFolder(const std::string& trace_dir) {
  std::string path = trace_dir;
  if (path.empty()) return path;
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == nullptr) RefuseFolder(path, "the working folder is unknown");
    path = std::string(cwd) + "/" + path;
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

void PrepareTraceFolder(const std::string& trace_dir) {
  if (trace_dir.empty()) return;
  const std::string path = AbsoluteTraceFolder(trace_dir);
  MakeFolders(path);
  const std::string probe = path + "/.infini_run_probe_" + std::to_string(getpid());
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) RefuseFolder(trace_dir, std::strerror(errno));
  const bool wrote = write(fd, "x", 1) == 1;
  const int write_error = errno;
  close(fd);
  unlink(probe.c_str());
  if (!wrote) RefuseFolder(trace_dir, std::strerror(write_error));
  // An earlier run's files would mix into this one's merge.
  for (const std::string& name : FolderEntries(path)) {
    if (IsTraceFile(name)) unlink((path + "/" + name).c_str());
  }
}

ClockAnswerer::ClockAnswerer(std::string store_host, uint16_t store_port, std::string run_token,
                             std::string key_namespace)
    : thread_([this, host = std::move(store_host), store_port, token = std::move(run_token),
               key_namespace = std::move(key_namespace)] {
        Loop(host, store_port, token, key_namespace);
      }) {}

ClockAnswerer::~ClockAnswerer() {
  stopping_.store(true);
  thread_.join();
}

void ClockAnswerer::Loop(const std::string& host, uint16_t port, const std::string& token,
                         const std::string& key_namespace) {
  try {
    std::shared_ptr<rendezvous::Store> client =
        rendezvous::TcpStoreClient::Connect(host, port, kAnswererConnectTimeout, token);
    rendezvous::PrefixStore store(key_namespace, std::move(client));
    for (int64_t number = 1; !stopping_.load();) {
      const std::string question = trace_format::ClockAskKey(number);
      try {
        store.Wait({question}, kQuestionPoll);
      } catch (const rendezvous::StoreTimeoutError&) {
        // A rank that took this number and died before asking must not
        // hold up the ones after it.
        if (store.Check({trace_format::ClockAskKey(number + 1)})) ++number;
        continue;
      }
      const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
      store.Set(trace_format::ClockAnswerKey(number), std::to_string(now));
      store.DeleteKey(question);
      ++number;
    }
  } catch (const std::exception&) {
    // The store went (the run ends): ranks that still ask record "not
    // measured", which the merge states.
  }
}

std::vector<RankTraceFile> ReadRankTraces(const std::string& trace_dir) {
  std::vector<RankTraceFile> ranks;
  for (const std::string& name : FolderEntries(trace_dir)) {
    if (name.rfind("rank", 0) != 0 || name.size() < 11 ||
        name.compare(name.size() - 6, 6, ".jsonl") != 0) {
      continue;
    }
    std::ifstream file(trace_dir + "/" + name);
    RankTraceFile rank;
    rank.rank = static_cast<int>(std::strtol(name.c_str() + 4, nullptr, 10));
    for (std::string line; std::getline(file, line);) {
      if (line.empty()) continue;
      const nlohmann::json fields = ParseObject(line);
      const std::string kind = Text(fields, "kind");
      if (kind == "op") {
        TraceOp op;
        op.category = Text(fields, "cat");
        op.name = Text(fields, "name");
        op.group = Text(fields, "group");
        op.dtype = Text(fields, "dtype");
        op.seq = Int(fields, "seq");
        op.count = Int(fields, "count");
        op.bytes = Int(fields, "bytes");
        op.world = Int(fields, "world");
        op.begin_ns = Int(fields, "begin_ns");
        op.end_ns = Int(fields, "end_ns");
        op.algorithm = Text(fields, "algorithm");
        op.protocol = Text(fields, "protocol");
        op.channels = Int(fields, "channels", -1);
        op.facts = Text(fields, "facts");
        op.instant = Int(fields, "instant") != 0;
        rank.ops.push_back(std::move(op));
        rank.ended = false;
      } else if (kind == "rank") {
        rank.node = static_cast<int>(Int(fields, "node"));
        rank.local_rank = static_cast<int>(Int(fields, "local_rank"));
        rank.pid = Int(fields, "pid");
        rank.host = Text(fields, "host");
        rank.ended = false;
      } else if (kind == "clock") {
        rank.clock_rtt_ns = Int(fields, "rtt_ns", -1);
        rank.clock_measured = rank.clock_rtt_ns >= 0;
        rank.clock_offset_ns = Int(fields, "offset_ns");
      } else if (kind == "dropped") {
        rank.dropped += Int(fields, "count");
      } else if (kind == "end") {
        rank.ended = true;
      } else {
        ++rank.unreadable_lines;
      }
    }
    ranks.push_back(std::move(rank));
  }
  std::sort(ranks.begin(), ranks.end(),
            [](const RankTraceFile& a, const RankTraceFile& b) { return a.rank < b.rank; });
  return ranks;
}

std::vector<MetricsEntry> ReadMetrics(const std::string& trace_dir, int* ranks_with_metrics) {
  std::vector<MetricsEntry> entries;
  *ranks_with_metrics = 0;
  for (const std::string& name : FolderEntries(trace_dir)) {
    if (name.rfind("metrics_rank", 0) != 0 || name.size() < 17 ||
        name.compare(name.size() - 5, 5, ".json") != 0) {
      continue;
    }
    ++*ranks_with_metrics;
    const int rank = static_cast<int>(std::strtol(name.c_str() + 12, nullptr, 10));
    std::ifstream file(trace_dir + "/" + name);
    std::stringstream text;
    text << file.rdbuf();
    const nlohmann::json document = ParseObject(text.str());
    const auto found = document.find("entries");
    if (found == document.end() || !found->is_array()) continue;
    for (const nlohmann::json& fields : *found) {
      if (!fields.is_object()) continue;
      MetricsEntry entry;
      entry.rank = rank;
      entry.group = Text(fields, "group");
      entry.op = Text(fields, "op");
      entry.size_class = Text(fields, "size_class");
      entry.calls = Int(fields, "calls");
      entry.bytes = Int(fields, "bytes");
      entry.time_ns = Int(fields, "time_ns");
      entry.bus_factor = Real(fields, "bus_factor");
      entries.push_back(std::move(entry));
    }
  }
  return entries;
}

}  // namespace infini::launch
