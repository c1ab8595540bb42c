// infini_run --trace_dir / --comm_summary (docs/tracing.md): gpt2 on gloo as
// two processes and as two thread ranks, the merged trace read back as
// JSON; an unwritable folder; and the merge's and the summary's rules on
// hand-made rank files (a rank killed mid-trace, the last rank named).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "infini/launch/trace_merge.h"
#include "launcher_harness.h"

namespace infini::launch::testing {
namespace {

using std::chrono::seconds;

constexpr int kSteps = 3;
const std::string kGpt2 = GPT2_PATH;
const std::vector<std::string> kGpt2Flags = {"--steps=" + std::to_string(kSteps),
                                             "--micro_batch_size=2",
                                             "--total_batch_size=128",
                                             "--channels=32",
                                             "--sequence_length=32",
                                             "--val_batches=1"};

// A small JSON reader: enough to prove trace.json is JSON and to walk it.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> members;
  const Json& operator[](const std::string& name) const {
    static const Json kMissing;
    const auto found = members.find(name);
    return found == members.end() ? kMissing : found->second;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : text_(text) {}
  // False (and `error` set) on anything but one whole JSON value.
  bool Read(Json* value, std::string* error) {
    const bool ok = Value(value) && (Space(), at_ == text_.size());
    if (!ok) *error = "not JSON near byte " + std::to_string(at_);
    return ok;
  }

 private:
  void Space() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool Take(char c) {
    Space();
    if (at_ < text_.size() && text_[at_] == c) return ++at_, true;
    return false;
  }
  bool String(std::string* out) {
    if (!Take('"')) return false;
    for (; at_ < text_.size(); ++at_) {
      if (text_[at_] == '"') return ++at_, true;
      if (text_[at_] == '\\') ++at_;
      if (at_ < text_.size()) *out += text_[at_];
    }
    return false;
  }
  bool Value(Json* value) {
    Space();
    if (at_ >= text_.size()) return false;
    const char c = text_[at_];
    if (c == '{') {
      ++at_;
      value->kind = Json::kObject;
      if (Take('}')) return true;
      do {
        std::string name;
        if (!String(&name) || !Take(':') || !Value(&value->members[name])) return false;
      } while (Take(','));
      return Take('}');
    }
    if (c == '[') {
      ++at_;
      value->kind = Json::kArray;
      if (Take(']')) return true;
      do {
        if (!Value(&value->items.emplace_back())) return false;
      } while (Take(','));
      return Take(']');
    }
    if (c == '"') return value->kind = Json::kString, String(&value->text);
    for (const char* word : {"true", "false", "null"}) {
      if (text_.compare(at_, std::strlen(word), word) == 0) {
        at_ += std::strlen(word);
        value->kind = word[0] == 'n' ? Json::kNull : Json::kBool;
        return true;
      }
    }
    char* end = nullptr;
    value->number = std::strtod(text_.c_str() + at_, &end);
    if (end == text_.c_str() + at_) return false;
    value->kind = Json::kNumber;
    at_ = static_cast<size_t>(end - text_.c_str());
    return true;
  }
  const std::string& text_;
  size_t at_ = 0;
};

Json ReadJsonFile(const std::string& path) {
  const std::string text = ReadFile(path);
  Json value;
  std::string error;
  EXPECT_TRUE(JsonReader(text).Read(&value, &error)) << path << ": " << error;
  return value;
}

// What a traced gpt2 run must leave: every rank's lane, each step's
// gradient all-reduce in order on each rank, the clocks, the metrics and
// the summary's skew line.
void ExpectTracedGpt2Run(const LauncherResult& run, const std::string& trace_dir, int ranks) {
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json trace = ReadJsonFile(trace_dir + "/trace.json");
  ASSERT_EQ(trace["traceEvents"].kind, Json::kArray);
  std::map<int, std::vector<const Json*>> all_reduces;  // by rank (tid)
  std::map<int, bool> lanes;
  for (const Json& event : trace["traceEvents"].items) {
    const int tid = static_cast<int>(event["tid"].number);
    if (event["ph"].text == "M" && event["name"].text == "thread_name") lanes[tid] = true;
    if (event["ph"].text == "X" && event["cat"].text == "ccl" &&
        event["name"].text == "all_reduce") {
      all_reduces[tid].push_back(&event);
    }
  }
  for (int rank = 0; rank < ranks; ++rank) {
    EXPECT_TRUE(lanes[rank]) << "no lane for rank " << rank;
    // The gradient all-reduce is each step's largest; gpt2 on a host
    // backend sends all gradients in one (docs/examples.md).
    double largest = 0;
    for (const Json* event : all_reduces[rank]) {
      largest = std::max(largest, (*event)["args"]["bytes"].number);
    }
    std::vector<const Json*> gradients;
    for (const Json* event : all_reduces[rank]) {
      if ((*event)["args"]["bytes"].number == largest) gradients.push_back(event);
    }
    ASSERT_EQ(gradients.size(), static_cast<size_t>(kSteps)) << "rank " << rank;
    for (size_t step = 1; step < gradients.size(); ++step) {
      EXPECT_GT((*gradients[step])["args"]["seq"].number,
                (*gradients[step - 1])["args"]["seq"].number);
      EXPECT_GT((*gradients[step])["ts"].number, (*gradients[step - 1])["ts"].number);
      EXPECT_EQ((*gradients[step])["args"]["group"].text, "world");
      EXPECT_EQ((*gradients[step])["args"]["dtype"].text, "float32");
    }
    const std::string key = std::to_string(rank);
    EXPECT_EQ(trace["otherData"]["clock_offsets_ns"][key].kind, Json::kNumber) << key;
    EXPECT_GE(trace["otherData"]["clock_rtt_ns"][key].number, 0)
        << "rank " << rank << "'s clock not measured";
    const Json metrics = ReadJsonFile(trace_dir + "/metrics_rank" + key + ".json");
    EXPECT_GE(metrics["total"]["calls"].number, kSteps);
    EXPECT_GE(metrics["total"]["bytes"].number, kSteps * largest);
    EXPECT_GT(metrics["total"]["time_ns"].number, 0);
  }
  EXPECT_EQ(trace["otherData"]["incomplete_ranks"].items.size(), 0u);
  EXPECT_NE(run.err.find("communication summary"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("all_reduce"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(" % of collectives, median lateness "), std::string::npos) << run.err;
}

std::vector<std::string> Gpt2Run(const std::vector<std::string>& launcher_flags,
                                 const std::vector<std::string>& gpt2_flags = {}) {
  std::vector<std::string> arguments = launcher_flags;
  arguments.push_back(kGpt2);
  arguments.insert(arguments.end(), kGpt2Flags.begin(), kGpt2Flags.end());
  arguments.insert(arguments.end(), gpt2_flags.begin(), gpt2_flags.end());
  return arguments;
}

TEST(TraceRun, Gpt2AsTwoProcessesIsMergedAlignedAndSummarized) {
  TempDir dir;
  const std::string trace_dir = dir.path() + "/trace";
  const LauncherResult run = RunLauncher(Gpt2Run({"--nproc_per_node=2", "--ccl_backend=gloo",
                                                  "--trace_dir=" + trace_dir, "--comm_summary"}),
                                         seconds(60));
  ExpectTracedGpt2Run(run, trace_dir, 2);
}

TEST(TraceRun, Gpt2AsTwoThreadRanksIsMergedAlignedAndSummarized) {
  TempDir dir;
  const std::string trace_dir = dir.path() + "/trace";
  const LauncherResult run = RunLauncher(Gpt2Run({"--nproc_per_node=1", "--ccl_backend=gloo",
                                                  "--trace_dir=" + trace_dir, "--comm_summary"},
                                                 {"--nthread_per_process=2"}),
                                         seconds(60));
  ExpectTracedGpt2Run(run, trace_dir, 2);
}

TEST(TraceRun, FullRingDropsTheOldestAndTheMergeCountsThem) {
  TempDir dir;
  const std::string trace_dir = dir.path() + "/trace";
  LaunchSetup setup;
  // Two events a ring: gpt2's first step issues more than that between two
  // drains (every 100 ms).
  setup.extra_environment = {"INFINI_CCL_TRACE_RING_EVENTS=2"};
  LauncherProcess launcher(
      Gpt2Run({"--nproc_per_node=2", "--ccl_backend=gloo", "--trace_dir=" + trace_dir}), setup);
  const LauncherResult run = launcher.Wait(seconds(60));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json trace = ReadJsonFile(trace_dir + "/trace.json");
  EXPECT_GT(trace["otherData"]["dropped_events"]["0"].number, 0)
      << ReadFile(trace_dir + "/trace.json");
  const Json metrics = ReadJsonFile(trace_dir + "/metrics_rank0.json");
  EXPECT_GT(metrics["dropped_events"].number, 0);
}

TEST(TraceRun, UnwritableTraceDirIsOneLineAndExitTwoBeforeAnyRank) {
  TempDir dir;
  const std::string file = dir.path() + "/a_file";
  std::ofstream(file) << "x";
  const std::string bad = file + "/trace";
  const LauncherResult run =
      RunLauncher({"--nproc_per_node=1", "--trace_dir=" + bad, ChildPath()}, seconds(20));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  ASSERT_EQ(Lines(run.err).size(), 1u) << run.err;
  EXPECT_NE(run.err.find("--trace_dir='" + bad + "'"), std::string::npos) << run.err;
  EXPECT_EQ(run.out, "");  // no rank started
}

RankTraceFile HandMadeRank(int rank, bool ended, std::vector<int64_t> begins) {
  RankTraceFile file;
  file.rank = rank;
  file.host = "h";
  file.ended = ended;
  file.clock_rtt_ns = 1000;
  file.clock_measured = true;
  for (size_t seq = 0; seq < begins.size(); ++seq) {
    TraceOp op;
    op.category = "ccl";
    op.name = "all_reduce";
    op.group = "world";
    op.seq = static_cast<int64_t>(seq);
    op.begin_ns = begins[seq];
    op.end_ns = begins[seq] + 500000;
    file.ops.push_back(op);
  }
  return file;
}

TEST(TraceMerge, RankKilledMidTraceIsMergedAndNamedInOneLine) {
  TempDir dir;
  const std::vector<RankTraceFile> ranks = {HandMadeRank(0, true, {1000000, 5000000}),
                                            HandMadeRank(1, false, {1000000})};
  const MergedTrace merged = MergeTraces(dir.path(), ranks);
  ASSERT_EQ(merged.notes.size(), 1u);
  EXPECT_NE(merged.notes[0].find("rank 1"), std::string::npos) << merged.notes[0];
  EXPECT_NE(merged.notes[0].find("1 events it flushed"), std::string::npos) << merged.notes[0];
  const Json trace = ReadJsonFile(merged.path);
  size_t spans = 0;
  for (const Json& event : trace["traceEvents"].items) spans += event["ph"].text == "X";
  EXPECT_EQ(spans, 3u);
  ASSERT_EQ(trace["otherData"]["incomplete_ranks"].items.size(), 1u);
  EXPECT_EQ(trace["otherData"]["incomplete_ranks"].items[0].number, 1);
}

TEST(TraceMerge, SummaryNamesTheRankThatArrivesLastWithAlignedClocks) {
  // Rank 1 enters 1 ms after rank 0 by its own clock, which runs 2 ms
  // behind the store's host: 3 ms late, every time.
  std::vector<RankTraceFile> ranks = {HandMadeRank(0, true, {10000000, 20000000, 30000000}),
                                      HandMadeRank(1, true, {11000000, 21000000, 31000000})};
  ranks[1].clock_offset_ns = 2000000;
  const std::string summary = CommSummary(ranks, {}, 2);
  EXPECT_NE(summary.find("rank 1 was last in 100.0 % of collectives, median lateness 3.000 ms"),
            std::string::npos)
      << summary;
}

TEST(TraceMerge, CutLineReadsAsNoObject) {
  EXPECT_TRUE(ParseFlatJson("{\"kind\":\"op\",\"cat\":\"cc").empty());
  const auto fields = ParseFlatJson("{\"kind\":\"op\",\"group\":\"a\\\"b\",\"seq\":-3}");
  EXPECT_EQ(fields.at("group"), "a\"b");
  EXPECT_EQ(fields.at("seq"), "-3");
}

}  // namespace
}  // namespace infini::launch::testing
