// infini_run --trace_dir / --comm_summary (docs/tracing.md): gpt2 on gloo as
// two processes and as two thread ranks, the merged trace read back as
// JSON; gloo's reported algorithm and sampled device spans; an unwritable
// folder or a bad INFINI_CCL_TRACE_DEVICE_EVERY; and the merge's and the summary's rules on
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

#include "infini/common/trace_format.h"
#include "infini/launch/trace_merge.h"
#include "launcher_harness.h"
#include "trace_json.h"

namespace infini::launch::testing {
namespace {

using infini::testing::ExpectDeviceSpansInsideTheirCalls;
using infini::testing::HostSpanOf;
using infini::testing::Json;
using infini::testing::ReadJsonFile;
using infini::testing::SpansOf;
using infini::testing::TraceSpan;
using std::chrono::seconds;

constexpr int kSteps = 3;
const std::string kGpt2 = GPT2_PATH;
const std::vector<std::string> kGpt2Flags = {"--steps=" + std::to_string(kSteps),
                                             "--micro_batch_size=2",
                                             "--total_batch_size=128",
                                             "--channels=32",
                                             "--sequence_length=32",
                                             "--val_batches=1"};

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

// gloo's profiler reports its algorithm per collective (plugin_profiler_v1.h):
// "plugin" spans inside their calls, naming it. Device spans are off on a
// host backend unless INFINI_CCL_TRACE_DEVICE_EVERY asks; then its events
// time the call itself, which proves the sampling, the anchor and the merge's
// device lane without a GPU.
TEST(TraceRun, GlooReportsItsAlgorithmAndSampledDeviceSpansAreInsideTheirCalls) {
  TempDir dir;
  const std::string trace_dir = dir.path() + "/trace";
  LaunchSetup setup;
  setup.extra_environment = {std::string(trace_format::kDeviceEveryVariable) + "=2"};
  LauncherProcess launcher(
      Gpt2Run({"--nproc_per_node=2", "--ccl_backend=gloo", "--trace_dir=" + trace_dir}), setup);
  const LauncherResult run = launcher.Wait(seconds(60));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json trace = ReadJsonFile(trace_dir + "/trace.json");
  const auto calls = SpansOf(trace, "ccl");
  const auto plugin = SpansOf(trace, "plugin");
  for (int rank = 0; rank < 2; ++rank) {
    size_t all_reduces = 0;
    for (const TraceSpan& call : calls.at(rank))
      all_reduces += (*call.event)["name"].text == "all_reduce";
    ASSERT_TRUE(plugin.count(rank)) << "no plugin events on rank " << rank;
    size_t reported = 0;
    for (const TraceSpan& span : plugin.at(rank)) {
      if ((*span.event)["name"].text != "all_reduce") continue;
      ++reported;
      EXPECT_EQ((*span.event)["args"]["algorithm"].text, "ring");
      const TraceSpan* call = HostSpanOf(calls, rank, span);
      ASSERT_NE(call, nullptr) << "seq " << (*span.event)["args"]["seq"].number;
      EXPECT_EQ((*call->event)["name"].text, "all_reduce");
      EXPECT_GE(span.begin_us, call->begin_us);  // one clock: nested exactly
      EXPECT_LE(span.end_us, call->end_us);
    }
    EXPECT_EQ(reported, all_reduces) << "rank " << rank;
    // Every second call of the process is timed.
    const size_t device_spans = ExpectDeviceSpansInsideTheirCalls(
        trace, rank, trace_format::kDeviceLaneBase, 50.0, /*ends_inside=*/true);
    EXPECT_GE(device_spans, calls.at(rank).size() / 2) << "rank " << rank;
    EXPECT_LE(device_spans, calls.at(rank).size() / 2 + 1) << "rank " << rank;
  }
}

TEST(TraceRun, BadDeviceEveryIsOneLineAndExitTwo) {
  TempDir dir;
  LaunchSetup setup;
  setup.extra_environment = {std::string(trace_format::kDeviceEveryVariable) + "=often"};
  LauncherProcess launcher(
      Gpt2Run({"--nproc_per_node=1", "--ccl_backend=gloo", "--trace_dir=" + dir.path() + "/trace"}),
      setup);
  const LauncherResult run = launcher.Wait(seconds(30));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("INFINI_CCL_TRACE_DEVICE_EVERY='often': expected a whole number >= 0"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("exit code 2"), std::string::npos) << run.err;
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

// A group or host name that is not UTF-8 (a user's label, a host name in
// another encoding) still leaves trace.json JSON: the bytes become U+FFFD,
// and names with quotes and control characters come back as written.
TEST(TraceMerge, NamesThatAreNotUtf8OrNeedEscapesKeepTheFileJson) {
  TempDir dir;
  std::vector<RankTraceFile> ranks = {HandMadeRank(0, true, {1000000})};
  ranks[0].host = "h\xff";
  ranks[0].ops[0].group = "g\xc3(\"q\"\t";
  const MergedTrace merged = MergeTraces(dir.path(), ranks);
  const Json trace = ReadJsonFile(merged.path);
  ASSERT_EQ(trace.kind, Json::kObject) << ReadFile(merged.path);
  bool found = false;
  for (const Json& event : trace["traceEvents"].items) {
    if (event["ph"].text != "X") continue;
    EXPECT_EQ(event["args"]["group"].text, "g\xef\xbf\xbd(\"q\"\t");
    found = true;
  }
  EXPECT_TRUE(found) << ReadFile(merged.path);
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

// A watchdog or recovery event (trace_format.h's "facts" lines): a point
// is "ph":"i" with its facts in args, a span "X" with its duration; facts
// that are not one object are left out rather than break the file.
TEST(TraceMerge, FaultEventsArePointsAndSpansWithTheirFactsInArgs) {
  TempDir dir;
  std::ofstream(dir.path() + "/rank0.jsonl")
      << "{\"kind\":\"rank\",\"rank\":0,\"node\":0,\"local_rank\":0,\"pid\":1,\"host\":\"h\"}\n"
         "{\"kind\":\"op\",\"cat\":\"recovery\",\"name\":\"loss_notice\",\"group\":\"\","
         "\"seq\":-1,\"instant\":1,\"facts\":\"{\\\"lost_ranks\\\":[1,3]}\",\"bytes\":0,"
         "\"begin_ns\":2000,\"end_ns\":2000}\n"
         "{\"kind\":\"op\",\"cat\":\"recovery\",\"name\":\"shrink\",\"group\":\"\",\"seq\":-1,"
         "\"facts\":\"{\\\"new_world_size\\\":2,\\\"why\\\":\\\"a \\\\\\\"b\\\\\\\"\\\"}\","
         "\"bytes\":0,\"begin_ns\":1000,\"end_ns\":5000}\n"
         "{\"kind\":\"op\",\"cat\":\"watchdog\",\"name\":\"timeout\",\"group\":\"world\","
         "\"seq\":-1,\"instant\":1,\"facts\":\"{\\\"op\\\":\",\"bytes\":0,\"begin_ns\":6000,"
         "\"end_ns\":6000}\n"
         "{\"kind\":\"end\"}\n";
  const MergedTrace merged = MergeTraces(dir.path(), ReadRankTraces(dir.path()));
  ASSERT_FALSE(merged.path.empty());
  const Json trace = ReadJsonFile(merged.path);
  std::map<std::string, const Json*> events;
  for (const Json& event : trace["traceEvents"].items) events[event["name"].text] = &event;
  ASSERT_TRUE(events.count("loss_notice")) << ReadFile(merged.path);
  const Json& notice = *events["loss_notice"];
  EXPECT_EQ(notice["ph"].text, "i");
  EXPECT_EQ(notice["cat"].text, "recovery");
  EXPECT_EQ(notice["ts"].number, 1);  // µs after the first event, the shrink's begin
  ASSERT_EQ(notice["args"]["lost_ranks"].items.size(), 2u);
  EXPECT_EQ(notice["args"]["lost_ranks"].items[1].number, 3);
  ASSERT_TRUE(events.count("shrink"));
  const Json& shrink = *events["shrink"];
  EXPECT_EQ(shrink["ph"].text, "X");
  EXPECT_EQ(shrink["dur"].number, 4);
  EXPECT_EQ(shrink["args"]["new_world_size"].number, 2);
  EXPECT_EQ(shrink["args"]["why"].text, "a \"b\"");
  ASSERT_TRUE(events.count("timeout"));  // the cut facts are left out, the event stays
  EXPECT_EQ((*events["timeout"])["args"]["group"].text, "world");
  EXPECT_EQ((*events["timeout"])["args"].members.count("op"), 0u);
}

// A line cut by a kill is counted unreadable; the lines around it, escapes
// and negative numbers included, read as written.
TEST(TraceMerge, CutLineIsCountedAndTheOthersRead) {
  TempDir dir;
  std::ofstream(dir.path() + "/rank3.jsonl")
      << "{\"kind\":\"rank\",\"rank\":3,\"node\":1,\"local_rank\":1,\"pid\":7,"
         "\"host\":\"h\\u00e9\\n\"}\n"
         "{\"kind\":\"op\",\"cat\":\"ccl\",\"name\":\"all_reduce\",\"group\":\"a\\\"b\","
         "\"seq\":-3,\"begin_ns\":1,\"end_ns\":2}\n"
         "{\"kind\":\"op\",\"cat\":\"cc\n";
  const std::vector<RankTraceFile> ranks = ReadRankTraces(dir.path());
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].rank, 3);
  EXPECT_EQ(ranks[0].node, 1);
  EXPECT_EQ(ranks[0].pid, 7);
  EXPECT_EQ(ranks[0].host, "h\xc3\xa9\n");
  ASSERT_EQ(ranks[0].ops.size(), 1u);
  EXPECT_EQ(ranks[0].ops[0].group, "a\"b");
  EXPECT_EQ(ranks[0].ops[0].seq, -3);
  EXPECT_EQ(ranks[0].unreadable_lines, 1);
  EXPECT_FALSE(ranks[0].ended);
}

}  // namespace
}  // namespace infini::launch::testing
