// ccl_conformance as a porting engineer runs it: under infini_run, on gloo,
// on the template plugin and on the kvtest plugin, in several process ×
// thread layouts, with --quick sizes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "conformance_runner.h"

namespace {

using infini::conformance_test::Conformance;
using infini::conformance_test::Row;
using infini::conformance_test::Rows;
using infini::conformance_test::RunCommand;
using infini::conformance_test::RunResult;

std::set<std::string> Named(const std::vector<Row>& rows, const std::string& verdict) {
  std::set<std::string> names;
  for (const Row& row : rows) {
    if (row.verdict == verdict) names.insert(row.name);
  }
  return names;
}

const Row* Find(const std::vector<Row>& rows, const std::string& name) {
  for (const Row& row : rows) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

void ExpectEveryRowJudged(const std::vector<Row>& rows, const std::string& output) {
  ASSERT_GT(rows.size(), 100u) << output;
  for (const Row& row : rows) {
    EXPECT_TRUE(row.verdict == "pass" || row.verdict == "unsupported" || row.verdict == "missing" ||
                row.verdict == "FAIL")
        << row.name << " " << row.verdict;
  }
}

void ExpectGlooPasses(const std::string& launcher_flags, const std::string& suite_flags) {
  const RunResult run = Conformance("gloo", launcher_flags, suite_flags);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<Row> rows = Rows(run.output);
  ExpectEveryRowJudged(rows, run.output);
  EXPECT_TRUE(Named(rows, "FAIL").empty()) << run.output;
  EXPECT_TRUE(Named(rows, "missing").empty()) << run.output;
  // The entries gloo has are judged, not skipped.
  for (const char* name :
       {"all_reduce/float32/sum", "reduce_scatter/bfloat16/max", "all_to_all_v/int64",
        "send_recv_ring/float16", "split/permuted_keys", "abort/unblocks_recv", "barrier",
        "shrink/drop_one_rank", "shrink/abort_outstanding", "revoke/unblocks_recv"}) {
    const Row* row = Find(rows, name);
    ASSERT_NE(row, nullptr) << name << "\n" << run.output;
    EXPECT_EQ(row->verdict, "pass") << name;
  }
  EXPECT_EQ(run.output.find("[rank1]:"), std::string::npos) << "only global rank 0 reports";
}

TEST(ConformanceRun, GlooPassesInTwoProcesses) { ExpectGlooPasses("--nproc_per_node=2", ""); }

TEST(ConformanceRun, GlooPassesInOneProcessOfTwoThreads) {
  ExpectGlooPasses("--nproc_per_node=1", "--nthread_per_process=2");
}

TEST(ConformanceRun, GlooPassesInTwoProcessesOfTwoThreads) {
  ExpectGlooPasses("--nproc_per_node=2", "--nthread_per_process=2");
}

TEST(ConformanceRun, TemplateReportsEveryItemAndNamesWhatToImplement) {
  const std::string json =
      ::testing::TempDir() + "conformance_template_" + std::to_string(getpid()) + ".json";
  const RunResult run = Conformance("template", "--nproc_per_node=2", "--json=" + json);
  EXPECT_EQ(run.exit_code, 1) << run.output;  // items missing; no crash, no hang
  const std::vector<Row> rows = Rows(run.output);
  ExpectEveryRowJudged(rows, run.output);
  // --json: the table's rows, in order, with the summary's counts.
  std::ifstream file(json);
  const nlohmann::json report = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  std::remove(json.c_str());
  ASSERT_TRUE(report.is_object()) << json << " is not one JSON object";
  EXPECT_EQ(report.at("backend"), "template");
  EXPECT_EQ(report.at("world_size"), 2);
  EXPECT_EQ(report.at("processes"), 2);
  EXPECT_EQ(report.at("threads_per_process"), 1);
  EXPECT_EQ(report.at("summary").at("missing"), Named(rows, "missing").size());
  EXPECT_EQ(report.at("summary").at("pass"), 0);
  ASSERT_EQ(report.at("items").size(), rows.size());
  for (size_t index = 0; index < rows.size(); ++index) {
    const nlohmann::json& item = report.at("items").at(index);
    EXPECT_EQ(item.at("name"), rows[index].name);
    EXPECT_EQ(item.at("verdict"), rows[index].verdict);
  }
  EXPECT_TRUE(Named(rows, "pass").empty()) << run.output;
  EXPECT_TRUE(Named(rows, "FAIL").empty()) << run.output;
  EXPECT_EQ(Named(rows, "missing").count("init/world"), 1u) << run.output;
  for (const char* entry :
       {"implement get_device_count (plugin.cc)", "implement set_device (plugin.cc)",
        "implement get_unique_id (plugin.cc)", "docs/porting.md step"}) {
    EXPECT_NE(run.output.find(entry), std::string::npos) << entry << "\n" << run.output;
  }
}

// kvtest declares: no average, no all_to_all, no group entries, no capture,
// not non-blocking, no host flags. Exactly those are unsupported; everything
// else passes.
std::set<std::string> KvtestDeclaredGaps() {
  std::set<std::string> gaps = {"all_to_all",         "group/two_all_reduce",
                                "init/non_blocking",  "capture/replay_all_reduce",
                                "runtime/host_flags", "runtime/host_flag_writes"};
  for (const char* collective : {"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_v"}) {
    for (const char* dtype :
         {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
          "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"}) {
      gaps.insert(std::string(collective) + "/" + dtype + "/avg");
    }
  }
  return gaps;
}

// `layout_gaps`: items this layout cannot run besides kvtest's declared gaps.
void ExpectKvtestShape(const std::string& launcher_flags, const std::string& suite_flags,
                       const std::set<std::string>& layout_gaps = {}) {
  const RunResult run = Conformance(KVTEST_PLUGIN_PATH, launcher_flags, suite_flags);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<Row> rows = Rows(run.output);
  ExpectEveryRowJudged(rows, run.output);
  std::set<std::string> gaps = KvtestDeclaredGaps();
  gaps.insert(layout_gaps.begin(), layout_gaps.end());
  EXPECT_EQ(Named(rows, "unsupported"), gaps) << run.output;
  EXPECT_TRUE(Named(rows, "FAIL").empty()) << run.output;
  EXPECT_TRUE(Named(rows, "missing").empty()) << run.output;
  const Row* id = Find(rows, "init/unique_id_through_store");
  ASSERT_NE(id, nullptr);
  EXPECT_NE(id->detail.find("4096 bytes"), std::string::npos) << id->detail;
  const Row* world = Find(rows, "init/world");
  ASSERT_NE(world, nullptr);
  EXPECT_NE(world->detail.find("comm_init_ranks"), std::string::npos) << world->detail;
}

TEST(ConformanceRun, KvtestReportsExactlyItsDeclaredGapsInTwoProcesses) {
  ExpectKvtestShape("--nproc_per_node=2", "");
}

TEST(ConformanceRun, KvtestReportsExactlyItsDeclaredGapsWithTwoThreadRanks) {
  ExpectKvtestShape("--nproc_per_node=1", "--nthread_per_process=2");
}

// infini_run --isolate_devices gives each process only its own device
// (KVTEST_VISIBLE_DEVICES=<local rank>): rank 1 then uses the one device it
// sees, not device 1 of the node. With one device per process there is none
// left for the process failure/peer_killed kills.
TEST(ConformanceRun, KvtestPassesWithEachProcessIsolatedOnItsOwnDevice) {
  ExpectKvtestShape("--nproc_per_node=2 --isolate_devices", "", {"failure/peer_killed"});
}

TEST(ConformanceRun, WrongResultIsAFailNamingTheFirstWrongElement) {
  const RunResult run = Conformance(KVTEST_PLUGIN_PATH, "--nproc_per_node=2",
                                    "--filter=all_reduce/float32", "KVTEST_FAULT=wrong_all_reduce");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const std::vector<Row> rows = Rows(run.output);
  const Row* sum = Find(rows, "all_reduce/float32/sum");
  ASSERT_NE(sum, nullptr) << run.output;
  EXPECT_EQ(sum->verdict, "FAIL");
  EXPECT_NE(sum->detail.find("count 13 out of place: element 2 of 13 is"), std::string::npos)
      << sum->detail;
  const Row* max = Find(rows, "all_reduce/float32/max");
  ASSERT_NE(max, nullptr) << run.output;
  EXPECT_EQ(max->verdict, "pass");
}

// A library that quietly made a world of one for each rank (1x2 asked, two
// 1-rank worlds made): refused at init by the host, so nothing is judged on
// the wrong world and nothing passes.
TEST(ConformanceRun, PluginMakingSmallerCommunicatorsThanAskedIsRefusedNeverPassed) {
  const RunResult run =
      Conformance(KVTEST_PLUGIN_PATH, "--nproc_per_node=1",
                  "--nthread_per_process=2 --filter=float32", "KVTEST_FAULT=one_rank_comms");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const std::vector<Row> rows = Rows(run.output);
  ASSERT_FALSE(rows.empty()) << run.output;
  const Row* world = Find(rows, "init/world");
  ASSERT_NE(world, nullptr) << run.output;
  EXPECT_EQ(world->verdict, "missing");
  EXPECT_NE(world->detail.find("of 1 ranks"), std::string::npos) << world->detail;
  EXPECT_NE(world->detail.find("asked for 2 ranks"), std::string::npos) << world->detail;
  for (const Row& row : rows) {
    if (row.name.rfind("runtime/", 0) == 0 || row.name.rfind("init/unique_id", 0) == 0) continue;
    EXPECT_NE(row.verdict, "pass") << row.name << " passed on a refused world";
  }
}

// Shrinking without the last rank, in a world where two survive: the
// shrunk communicator's size, ranks and results, and a shrink with the
// abort flag that ends a receive the lost rank never answers.
TEST(ConformanceRun, ShrinkPassesOnGlooAndKvtestInThreeProcesses) {
  for (const std::string& backend : {std::string("gloo"), std::string(KVTEST_PLUGIN_PATH)}) {
    const RunResult run = Conformance(backend, "--nproc_per_node=3", "--filter=shrink/");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    const std::vector<Row> rows = Rows(run.output);
    for (const char* name : {"shrink/drop_one_rank", "shrink/abort_outstanding"}) {
      const Row* row = Find(rows, name);
      ASSERT_NE(row, nullptr) << name << "\n" << run.output;
      EXPECT_EQ(row->verdict, "pass") << backend << " " << name << row->detail;
    }
    EXPECT_NE(Find(rows, "shrink/drop_one_rank")->detail.find("2 of 3 ranks"), std::string::npos)
        << run.output;
  }
}

// A comm_shrink that is declared but makes a communicator of the parent's
// size is refused by the host and judged FAIL, never pass; the lost rank
// does not wait out the item for survivors that failed.
TEST(ConformanceRun, ShrinkDeclaredButWrongIsAFail) {
  const auto start = std::chrono::steady_clock::now();
  const RunResult run = Conformance(KVTEST_PLUGIN_PATH, "--nproc_per_node=2", "--filter=shrink/",
                                    "KVTEST_FAULT=wrong_shrink_size");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const std::vector<Row> rows = Rows(run.output);
  for (const char* name : {"shrink/drop_one_rank", "shrink/abort_outstanding"}) {
    const Row* row = Find(rows, name);
    ASSERT_NE(row, nullptr) << name << "\n" << run.output;
    EXPECT_EQ(row->verdict, "FAIL") << name;
    EXPECT_NE(row->detail.find("comm_shrink made a communicator of 2 ranks"), std::string::npos)
        << row->detail;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// comm_register/comm_deregister: kvtest's pass; declared but broken is a
// FAIL naming the call; a plugin without them (gloo) is unsupported.
TEST(ConformanceRun, RegistrationIsJudgedWhereDeclared) {
  const RunResult good =
      Conformance(KVTEST_PLUGIN_PATH, "--nproc_per_node=2", "--filter=register/", "");
  EXPECT_EQ(good.exit_code, 0) << good.output;
  const std::vector<Row> good_rows = Rows(good.output);
  const Row* passed = Find(good_rows, "register/all_reduce");
  ASSERT_NE(passed, nullptr) << good.output;
  EXPECT_EQ(passed->verdict, "pass") << good.output;
  const RunResult broken = Conformance(KVTEST_PLUGIN_PATH, "--nproc_per_node=2",
                                       "--filter=register/", "KVTEST_FAULT=broken_register");
  EXPECT_EQ(broken.exit_code, 1) << broken.output;
  const std::vector<Row> broken_rows = Rows(broken.output);
  const Row* failed = Find(broken_rows, "register/all_reduce");
  ASSERT_NE(failed, nullptr) << broken.output;
  EXPECT_EQ(failed->verdict, "FAIL");
  EXPECT_NE(failed->detail.find("comm_register of a device buffer failed"), std::string::npos)
      << failed->detail;
  const RunResult gloo = Conformance("gloo", "--nproc_per_node=2", "--filter=register/");
  const std::vector<Row> gloo_rows = Rows(gloo.output);
  const Row* undeclared = Find(gloo_rows, "register/all_reduce");
  ASSERT_NE(undeclared, nullptr) << gloo.output;
  EXPECT_EQ(undeclared->verdict, "unsupported");
  EXPECT_NE(undeclared->detail.find("comm_register is NULL"), std::string::npos)
      << undeclared->detail;
  // Window registration, in the same runs.
  const Row* window = Find(good_rows, "register/window_all_reduce");
  ASSERT_NE(window, nullptr) << good.output;
  EXPECT_EQ(window->verdict, "pass") << good.output;
  const Row* window_failed = Find(broken_rows, "register/window_all_reduce");
  ASSERT_NE(window_failed, nullptr) << broken.output;
  EXPECT_NE(window_failed->detail.find("comm_window_register of a device buffer failed"),
            std::string::npos)
      << window_failed->detail;
  const Row* window_undeclared = Find(gloo_rows, "register/window_all_reduce");
  ASSERT_NE(window_undeclared, nullptr) << gloo.output;
  EXPECT_EQ(window_undeclared->verdict, "unsupported");
}

// A plugin without the entries: unsupported, naming the entry.
TEST(ConformanceRun, ShrinkAndRevokeUndeclaredAreUnsupported) {
  const RunResult run = Conformance("template", "--nproc_per_node=2", "--filter=/");
  const std::vector<Row> rows = Rows(run.output);
  for (const auto& [name, entry] : {std::pair{"shrink/drop_one_rank", "comm_shrink is NULL"},
                                    std::pair{"revoke/unblocks_recv", "comm_revoke is NULL"}}) {
    const Row* row = Find(rows, name);
    ASSERT_NE(row, nullptr) << name << "\n" << run.output;
    EXPECT_EQ(row->verdict, "unsupported") << name;
    EXPECT_NE(row->detail.find(entry), std::string::npos) << row->detail;
  }
}

// Results wrong only when a process holds several ranks: right in 2x1,
// FAIL in 1x2, judged against the layout.
TEST(ConformanceRun, ResultsWrongInOneLayoutOnlyAreAFailInThatLayout) {
  const std::string fault = "KVTEST_FAULT=wrong_with_threads";
  const RunResult processes =
      Conformance(KVTEST_PLUGIN_PATH, "--nproc_per_node=2", "--filter=all_reduce/float32", fault);
  EXPECT_EQ(processes.exit_code, 0) << processes.output;
  const RunResult threads =
      Conformance(KVTEST_PLUGIN_PATH, "--nproc_per_node=1",
                  "--nthread_per_process=2 --filter=all_reduce/float32", fault);
  EXPECT_EQ(threads.exit_code, 1) << threads.output;
  const Row* sum = Find(Rows(threads.output), "all_reduce/float32/sum");
  ASSERT_NE(sum, nullptr) << threads.output;
  EXPECT_EQ(sum->verdict, "FAIL");
  EXPECT_NE(sum->detail.find("element 0"), std::string::npos) << sum->detail;
}

// A library that allows one rank per process declares it: thread layouts
// are unsupported with that reason, no communicator is made, and the suite
// exits 0; process layouts are judged as usual.
TEST(ConformanceRun, OneRankPerProcessBackendIsUnsupportedInThreadLayoutsAndExitsZero) {
  const RunResult threads =
      Conformance(KVTEST_ONE_PLUGIN_PATH, "--nproc_per_node=1", "--nthread_per_process=2");
  ASSERT_EQ(threads.exit_code, 0) << threads.output;
  const std::vector<Row> rows = Rows(threads.output);
  ExpectEveryRowJudged(rows, threads.output);
  EXPECT_TRUE(Named(rows, "missing").empty()) << threads.output;
  EXPECT_TRUE(Named(rows, "FAIL").empty()) << threads.output;
  EXPECT_TRUE(Named(rows, "pass").count("init/world") == 0) << threads.output;
  for (const Row& row : rows) {
    if (row.name.rfind("runtime/", 0) == 0) continue;
    EXPECT_EQ(row.verdict, "unsupported") << row.name;
    EXPECT_NE(row.detail.find("INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS"), std::string::npos)
        << row.name << ": " << row.detail;
  }
  const RunResult processes =
      Conformance(KVTEST_ONE_PLUGIN_PATH, "--nproc_per_node=2", "--filter=float32");
  ASSERT_EQ(processes.exit_code, 0) << processes.output;
  const Row* sum = Find(Rows(processes.output), "all_reduce/float32/sum");
  ASSERT_NE(sum, nullptr) << processes.output;
  EXPECT_EQ(sum->verdict, "pass");
}

// Four ranks: the smallest world where a split into halves has more than
// one rank per half (a split that ignored `key` showed only here).
TEST(ConformanceRun, GlooSplitPassesInFourProcesses) {
  const RunResult run =
      Conformance("gloo", "--nproc_per_node=4", "--filter=split/ --item_timeout_s=30");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Row* split = Find(Rows(run.output), "split/permuted_keys");
  ASSERT_NE(split, nullptr) << run.output;
  EXPECT_EQ(split->verdict, "pass");
}

TEST(ConformanceRun, HungItemIsAbortedReportedAndTheNextItemsRun) {
  const RunResult run =
      Conformance(KVTEST_PLUGIN_PATH, "--nproc_per_node=2", "--filter=float32 --item_timeout_s=3",
                  "KVTEST_FAULT=hang_broadcast");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const std::vector<Row> rows = Rows(run.output);
  const Row* broadcast = Find(rows, "broadcast/float32");
  ASSERT_NE(broadcast, nullptr) << run.output;
  EXPECT_EQ(broadcast->verdict, "FAIL");
  EXPECT_NE(broadcast->detail.find("did not finish within 3 s"), std::string::npos)
      << broadcast->detail;
  for (const char* after : {"all_gather/float32", "gather/float32", "send_recv_ring/float32"}) {
    const Row* row = Find(rows, after);
    ASSERT_NE(row, nullptr) << after << "\n" << run.output;
    EXPECT_EQ(row->verdict, "pass") << after << ": " << row->detail;
  }
}

#ifdef CCL_BENCH_PATH
// ccl_bench knows nothing of kvtest's shape: it runs and checks all_reduce.
void ExpectBenchRunsOnKvtest(const std::string& launcher_flags, const std::string& bench_flags) {
  const RunResult run =
      RunCommand(std::string(INFINI_RUN_PATH) + " --ccl_backend=" + KVTEST_PLUGIN_PATH + " " +
                 launcher_flags + " -- " + CCL_BENCH_PATH +
                 " --collectives=all_reduce --op=sum --max_bytes=4K --iters=2 "
                 "--warmup=1 --check " +
                 bench_flags);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("ccl_bench: backend kvtest, 2 ranks"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--check passed"), std::string::npos) << run.output;
}

TEST(ConformanceRun, CclBenchRunsOnKvtestInTwoProcesses) {
  ExpectBenchRunsOnKvtest("--nproc_per_node=2", "");
}

TEST(ConformanceRun, CclBenchRunsOnKvtestWithTwoThreadRanks) {
  ExpectBenchRunsOnKvtest("--nproc_per_node=1", "--threads_per_process=2");
}

// -R 1: the buffers registered with the communicator (kvtest has the
// entries), the results still right.
TEST(ConformanceRun, CclBenchRunsOnKvtestWithRegisteredBuffers) {
  ExpectBenchRunsOnKvtest("--nproc_per_node=2", "-R 1");
}
#endif

TEST(ConformanceRun, BadFlagIsOneLineAndExitCodeTwo) {
  const RunResult run = RunCommand(std::string(CCL_CONFORMANCE_PATH) + " --item_timeout_s=0");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--item_timeout_s=0: expected at least 1 second"), std::string::npos)
      << run.output;
}

size_t LineCount(const std::string& output) {
  size_t lines = 0;
  for (char c : output) lines += c == '\n' ? 1 : 0;
  return lines;
}

// Every count flag has an upper bound, said with the flag and the value in
// one line, exit 2. Before, --nthread_per_process=1025 tried to make the
// threads (and aborted where it could not: "terminate called", exit 134).
TEST(ConformanceRun, CountsAboveTheirBoundAreOneLineAndExitCodeTwo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--nthread_per_process=1025",
       "--nthread_per_process=1025: expected a number of ranks per process in [1, 1024]"},
      {"--threads_per_process=4294967296",
       "--threads_per_process=4294967296: expected a number of ranks per process in [1, 1024]"},
      {"--item_timeout_s=604801",
       "--item_timeout_s=604801: expected at least 1 second, at most 604800"},
      {"--large_count=1073741825",
       "--large_count=1073741825: expected at least 2 elements, at most 1073741824"},
  };
  for (const auto& [flag, message] : cases) {
    const RunResult run = RunCommand(std::string(CCL_CONFORMANCE_PATH) + " " + flag);
    EXPECT_EQ(run.exit_code, 2) << flag << "\n" << run.output;
    EXPECT_EQ(LineCount(run.output), 1u) << flag << "\n" << run.output;
    EXPECT_NE(run.output.find("ccl_conformance: " + message), std::string::npos) << flag << "\n"
                                                                                 << run.output;
  }
#ifdef CCL_BENCH_PATH
  const RunResult bench =
      RunCommand(std::string(CCL_BENCH_PATH) + " --warmup=4294967296 --iters=2147483648");
  EXPECT_EQ(bench.exit_code, 2) << bench.output;
  EXPECT_EQ(LineCount(bench.output), 1u) << bench.output;
  EXPECT_NE(bench.output.find(
                "ccl_bench: --warmup='4294967296': expected an integer from 0 to 1000000000"),
            std::string::npos)
      << bench.output;
#endif
}

// Threads that cannot be made: stacks of 1 GiB (ulimit -s) in 6 GiB of
// address space (ulimit -v, enforced for root too) leave room for a few rank
// threads of 16, always. One line naming the thread, the count and why, exit
// 1; never std::terminate (before: "terminate called without an active
// exception", exit 134). Sanitizers reserve more address space than that.
TEST(ConformanceRun, RankThreadsThatCannotBeMadeAreOneLineNotAnAbort) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve more address space than the limit here";
#else
  const std::string limits = "bash -c 'ulimit -s 1048576 && ulimit -v 6291456 && exec ";
  const RunResult run = RunCommand(limits + CCL_CONFORMANCE_PATH +
                                   " --ccl_backend=gloo --quick --nthread_per_process=16'");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(LineCount(run.output), 1u) << run.output;
  EXPECT_NE(run.output.find("ccl_conformance: cannot start thread "), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find(" of 16 for the rank threads (--nthread_per_process=16): Resource "
                            "temporarily unavailable"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("terminate called"), std::string::npos) << run.output;
#ifdef CCL_BENCH_PATH
  // ccl_bench's ranks are made by the plugin's comm_init_ranks (gloo's one
  // thread per rank), then by ccl_bench itself: either says so in one line.
  const RunResult bench = RunCommand(limits + CCL_BENCH_PATH +
                                     " --ccl_backend=gloo --threads_per_process=16 "
                                     "--max_bytes=1K'");
  EXPECT_EQ(bench.exit_code, 1) << bench.output;
  EXPECT_EQ(LineCount(bench.output), 1u) << bench.output;
  EXPECT_NE(bench.output.find("cannot start thread "), std::string::npos) << bench.output;
  EXPECT_NE(bench.output.find(" of 16 "), std::string::npos) << bench.output;
  EXPECT_NE(bench.output.find("Resource temporarily unavailable"), std::string::npos)
      << bench.output;
#endif
#endif
}

// A port nothing listens on (it may be taken again once this returns, but
// not by a store of this test).
int UnusedLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// The run's store of ccl_conformance and ccl_bench (conformance/'s
// RunStore): a process whose store is dead says what it waits for and until
// when (the first line after 5 s, then every 30 s), and gives up at its
// deadline with one line: INFINI_CCL_TIMEOUT_S + 30 s by default, 7 s here
// (INFINI_CCL_STORE_CONNECT_TIMEOUT_S). Before, 31 s without a word.
TEST(ConformanceRun, AProcessWaitingForADeadRunStoreSaysWhatItWaitsFor) {
  const std::string port = std::to_string(UnusedLoopbackPort());
  const std::string environment =
      "env RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 INFINI_STORE_ADDR=127.0.0.1 "
      "INFINI_STORE_PORT=" +
      port + " INFINI_CCL_TIMEOUT_S=1 INFINI_CCL_STORE_CONNECT_TIMEOUT_S=7 ";
  std::vector<std::pair<std::string, std::string>> programs = {
      {"ccl_conformance", std::string(CCL_CONFORMANCE_PATH) + " --ccl_backend=gloo --quick"}};
#ifdef CCL_BENCH_PATH
  programs.push_back({"ccl_bench", std::string(CCL_BENCH_PATH) + " --ccl_backend=gloo"});
#endif
  std::vector<std::future<RunResult>> runs;
  for (const auto& [name, command] : programs) {
    runs.push_back(std::async(std::launch::async,
                              [command = environment + command] { return RunCommand(command); }));
  }
  for (size_t i = 0; i < programs.size(); ++i) {
    const std::string& name = programs[i].first;
    const RunResult run = runs[i].get();
    EXPECT_EQ(run.exit_code, 1) << name << "\n" << run.output;
    EXPECT_EQ(LineCount(run.output), 2u) << name << "\n" << run.output;
    for (const std::string& part : {name + ": waiting for the run's store at 127.0.0.1:" + port +
                                        " (INFINI_STORE_ADDR/INFINI_STORE_PORT) since ",
                                    std::string("(last try: Connection refused); gives up at "),
                                    std::string(" s (INFINI_CCL_STORE_CONNECT_TIMEOUT_S=7)\n"),
                                    name + ": could not connect to store at 127.0.0.1:" + port +
                                        " after 7s: Connection refused (the run's store, named by "
                                        "INFINI_STORE_ADDR/INFINI_STORE_PORT; "
                                        "INFINI_CCL_STORE_CONNECT_TIMEOUT_S=7)"}) {
      EXPECT_NE(run.output.find(part), std::string::npos) << name << ": " << part << "\n"
                                                          << run.output;
    }
  }
}

bool Accepts(const std::string& host, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &address.sin_addr);
  const bool accepted = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return accepted;
}

// Without a launcher, global rank 0 hosts the run's store at MASTER_ADDR: a
// numeric address of this host is listened on alone, also when the run
// spans hosts (WORLD_SIZE=2 > LOCAL_WORLD_SIZE=1); 127.0.0.3 does not answer
// on its port. Before, every interface. Rank 1 then meets it and both pass.
TEST(ConformanceRun, RankZerosStoreListensOnMasterAddrAlone) {
  const int port = UnusedLoopbackPort();
  auto rank = [port](int rank_number) {
    return "env RANK=" + std::to_string(rank_number) +
           " LOCAL_RANK=0 GROUP_RANK=" + std::to_string(rank_number) +
           " WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.2 MASTER_PORT=" +
           std::to_string(port) + " GLOO_SOCKET_IFNAME=lo INFINI_CCL_TIMEOUT_S=30 " +
           CCL_CONFORMANCE_PATH + " --ccl_backend=gloo --quick --filter=all_reduce/float32";
  };
  std::future<RunResult> rank0 =
      std::async(std::launch::async, [&rank] { return RunCommand(rank(0)); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!Accepts("127.0.0.2", port) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(Accepts("127.0.0.2", port)) << "rank 0's store never listened on 127.0.0.2";
  EXPECT_FALSE(Accepts("127.0.0.3", port)) << "rank 0's store answers on 127.0.0.3 too";
  const RunResult rank1 = RunCommand(rank(1));
  const RunResult first = rank0.get();
  EXPECT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(rank1.exit_code, 0) << rank1.output;
  EXPECT_EQ(first.output.find("every interface"), std::string::npos) << first.output;
}

}  // namespace
