// gpt2 on CUDA devices (label "gpu", run by scripts/gpu_check.sh): the model
// computes on the GPU, and must train like the host path; data parallelism
// over NCCL, in process and thread layouts and with or without overlap, must
// train like one rank with the same global batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "infini/common/trace_format.h"
#include "program_runner.h"
#include "trace_json.h"

namespace {

using namespace infini::examples::gpt2::testing;

// GPU builds are made on one machine and run on another (scripts/gpu_check.sh
// carries the build): find the programs beside this test in bin/, not at the
// paths of the machine that compiled it.
std::string BesideThisTest(const std::string& program) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / program).string();
}

const std::string kGpt2 = BesideThisTest("gpt2");
const std::string kInfiniRun = BesideThisTest("infini_run");
const std::string kSmallModel = " --channels=32 --sequence_length=32 --val_batches=1";
const std::string kOneGpu = kGpt2 + " --ccl_backend=nccl";

int VisibleGpus() {
  const Result result = RunCommand("nvidia-smi -L");
  if (result.exit_code != 0) return 0;
  int gpus = 0;
  for (size_t at = result.output.find("GPU "); at != std::string::npos;
       at = result.output.find("GPU ", at + 1)) {
    if (at == 0 || result.output[at - 1] == '\n') ++gpus;
  }
  return gpus;
}

double Mean(const std::vector<double>& values, size_t first, size_t count) {
  double sum = 0.0;
  for (size_t i = first; i < first + count; ++i) sum += values.at(i);
  return sum / static_cast<double>(count);
}

TEST(Gpt2Gpu, LossMatchesTheHostPathForTenStepsInFloat32) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  const std::string flags = " --num_iteration=10 --batch_size=4" + kSmallModel;
  const Result host = RunCommand(kGpt2 + flags);
  const Result gpu = RunCommand(kOneGpu + flags);
  ASSERT_EQ(host.exit_code, 0) << host.output;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  EXPECT_NE(gpu.output.find("compute: cuda:0, float32"), std::string::npos) << gpu.output;
  EXPECT_EQ(ParseThroughput(gpu.output).fields["place"], "gpu") << gpu.output;
  ExpectSameLosses(StepLosses(host.output), StepLosses(gpu.output), gpu.output, 1e-3);
}

TEST(Gpt2Gpu, LossMatchesTheHostPathWithAccumulationOnAnotherShape) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  // 3 layers, 6 heads of 8: another shape of every kernel; accumulation
  // runs the gradient sums across micro-steps.
  const std::string flags =
      " --num_iteration=5 --batch_size=3 --gradient_accumulation_steps=2 --num_layers=3 "
      "--num_heads=6 --channels=48 --sequence_length=40 --val_batches=1";
  const Result host = RunCommand(kGpt2 + flags);
  const Result gpu = RunCommand(kOneGpu + flags);
  ASSERT_EQ(host.exit_code, 0) << host.output;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  ExpectSameLosses(StepLosses(host.output), StepLosses(gpu.output), gpu.output, 1e-3);
}

TEST(Gpt2Gpu, Bfloat16Trains) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  const Result result =
      RunCommand(kOneGpu + " --dtype=bfloat16 --num_iteration=30 --batch_size=8" + kSmallModel);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("bfloat16"), std::string::npos) << result.output;
  const std::vector<double> losses = StepLosses(result.output);
  ASSERT_EQ(losses.size(), 30u) << result.output;
  EXPECT_LT(Mean(losses, 25, 5), Mean(losses, 0, 5) - 0.5) << result.output;
}

// The grad norm of every step line ("| grad norm X |").
std::vector<double> StepGradientNorms(const std::string& output) {
  std::vector<double> norms;
  const std::string key = "| grad norm ";
  for (size_t at = output.find(key); at != std::string::npos; at = output.find(key, at + 1)) {
    norms.push_back(std::stod(output.substr(at + key.size())));
  }
  return norms;
}

// Heads of 64 in bfloat16 take the fused attention (examples/gpt2/cuda/
// attention.h); its forward (the first loss), its backward (the first
// gradient norm) and ten steps of training must follow the host's float32
// within bf16's rounding. T = 100 leaves a partial 64-row tile.
TEST(Gpt2Gpu, Bfloat16FusedAttentionFollowsTheHostPath) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  const std::string flags =
      " --num_iteration=10 --batch_size=4 --num_heads=2 --channels=128 --sequence_length=100 "
      "--val_batches=1";
  const Result host = RunCommand(kGpt2 + flags);
  const Result gpu = RunCommand(kOneGpu + " --dtype=bfloat16" + flags);
  ASSERT_EQ(host.exit_code, 0) << host.output;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  const std::vector<double> host_losses = StepLosses(host.output);
  const std::vector<double> gpu_losses = StepLosses(gpu.output);
  ASSERT_EQ(gpu_losses.size(), 10u) << gpu.output;
  EXPECT_NEAR(host_losses.at(0), gpu_losses[0], 0.02) << gpu.output;
  const std::vector<double> host_norms = StepGradientNorms(host.output);
  const std::vector<double> gpu_norms = StepGradientNorms(gpu.output);
  ASSERT_FALSE(gpu_norms.empty()) << gpu.output;
  EXPECT_NEAR(host_norms.at(0), gpu_norms[0], 0.05 * host_norms.at(0)) << gpu.output;
  ExpectSameLosses(host_losses, gpu_losses, gpu.output, 0.1);
}

// The same shape in float32: the fused attention on the CUDA cores must
// train like the host path as closely as the unfused one does.
TEST(Gpt2Gpu, Float32FusedAttentionMatchesTheHostPath) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  const std::string flags =
      " --num_iteration=10 --batch_size=4 --num_heads=2 --channels=128 --sequence_length=100 "
      "--val_batches=1";
  const Result host = RunCommand(kGpt2 + flags);
  const Result gpu = RunCommand(kOneGpu + flags);
  ASSERT_EQ(host.exit_code, 0) << host.output;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  ExpectSameLosses(StepLosses(host.output), StepLosses(gpu.output), gpu.output, 1e-3);
}

TEST(Gpt2Gpu, D12RunsAndStartsNearUniformLoss) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  const Result result = RunCommand(kOneGpu +
                                   " --model=d12 --dtype=bfloat16 --batch_size=4 "
                                   "--sequence_length=256 --num_iteration=3 --val_batches=1");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("vocabulary padded to 50304"), std::string::npos) << result.output;
  const std::vector<double> losses = StepLosses(result.output);
  ASSERT_EQ(losses.size(), 3u) << result.output;
  EXPECT_NEAR(losses[0], std::log(50257.0), 0.5) << result.output;  // ~10.8 at initialization
}

// 2 ranks × micro-batch 2 against 1 rank × micro-batch 4: the same global
// batch, so the same losses (within the sums' rounding).
void ExpectTwoRanksTrainLikeOne(const std::string& two_ranks_command) {
  const Result one = RunCommand(kOneGpu + " --batch_size=4 --num_iteration=5" + kSmallModel);
  const Result two =
      RunCommand(two_ranks_command + " --batch_size=2 --num_iteration=5" + kSmallModel);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("2 ranks, backend nccl (cuda:0)"), std::string::npos) << two.output;
  EXPECT_EQ(ParseThroughput(two.output).ranks, 2) << two.output;
  ExpectSameLosses(StepLosses(one.output), StepLosses(two.output), two.output);
}

TEST(Gpt2Gpu, TwoProcessesOnNcclTrainLikeOneRank) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  ExpectTwoRanksTrainLikeOne(kInfiniRun + " --ccl_backend=nccl --nproc_per_node=2 " + kGpt2);
}

TEST(Gpt2Gpu, TwoThreadsOnNcclTrainLikeOneRank) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  ExpectTwoRanksTrainLikeOne(kInfiniRun + " --ccl_backend=nccl --nproc_per_node=1 " + kGpt2 +
                             " --nthread_per_process=2");
}

TEST(Gpt2Gpu, AllReduceAfterBackwardTrainsLikeOverlap) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  ExpectTwoRanksTrainLikeOne(kInfiniRun + " --ccl_backend=nccl --nproc_per_node=2 " + kGpt2 +
                             " --overlap=false");
}

TEST(Gpt2Gpu, SmallBucketsWithAccumulationTrainLikeOneRank) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const Result one = RunCommand(kOneGpu + " --batch_size=4 --num_iteration=4" + kSmallModel);
  // Micro-batch 1 × 2 accumulation × 2 ranks = 4 samples per step; 1 MiB
  // buckets hold one gradient group each at this size.
  const Result two =
      RunCommand(kInfiniRun + " --ccl_backend=nccl --nproc_per_node=2 " + kGpt2 +
                 " --batch_size=1 --gradient_accumulation_steps=2 --bucket_size_mb=1 "
                 "--num_iteration=4" +
                 kSmallModel);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(two.exit_code, 0) << two.output;
  ExpectSameLosses(StepLosses(one.output), StepLosses(two.output), two.output);
}

// The communication trace on a GPU (docs/tracing.md, "Device spans"): each
// collective's device span is in its rank's device lane, starts no earlier
// than its call (less the anchor's launch latency) and takes time; the
// device runs it after the host's enqueue, so its end may follow the call's.
TEST(Gpt2Gpu, TraceHasDeviceSpansOfEveryCallAfterTheirEnqueue) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  TemporaryDirectory directory;
  const std::string trace_dir = directory.path() + "/trace";
  const Result run = RunCommand("INFINI_CCL_TRACE_DEVICE_EVERY=1 " + kInfiniRun +
                                " --ccl_backend=nccl --nproc_per_node=1 --trace_dir=" + trace_dir +
                                " " + kGpt2 + " --num_iteration=5 --batch_size=4" + kSmallModel);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const infini::testing::Json trace = infini::testing::ReadJsonFile(trace_dir + "/trace.json");
  const size_t calls = infini::testing::SpansOf(trace, "ccl")[0].size();
  ASSERT_GT(calls, 0u) << run.output;
  // 20 µs: the anchor's launch latency is a few µs on an idle stream.
  const size_t device_spans = infini::testing::ExpectDeviceSpansInsideTheirCalls(
      trace, 0, infini::trace_format::kDeviceLaneBase, 20.0, /*ends_inside=*/false);
  // Every call is timed (INFINI_CCL_TRACE_DEVICE_EVERY=1), except those
  // inside GroupStart/GroupEnd.
  EXPECT_GT(device_spans, 0u);
  EXPECT_LE(device_spans, calls);
  EXPECT_EQ(trace["otherData"]["incomplete_ranks"].items.size(), 0u);
}

// NCCL's own events in the trace (docs/tracing.md, "Events a plugin
// reports"): with tracing on, the nccl plugin is NCCL's profiler. NCCL says
// so in its log; a profiler the user names in NCCL_PROFILER_PLUGIN wins,
// with one line per rank. (One rank runs no NCCL algorithm: NCCL copies, so
// only two GPUs show the events; the next test.)
TEST(Gpt2Gpu, TraceMakesTheNcclPluginNcclsProfilerUnlessTheUserNamedOne) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  const std::string loaded = "PROFILER/Plugin: Loaded infini_ccl_nccl (v5)";
  TemporaryDirectory directory;
  const std::string run = kInfiniRun +
                          " --ccl_backend=nccl --nproc_per_node=1 --trace_dir=" + directory.path() +
                          "/trace " + kGpt2 + " --num_iteration=2 --batch_size=4" + kSmallModel;
  const Result ours = RunCommand("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT " + run);
  ASSERT_EQ(ours.exit_code, 0) << ours.output;
  std::printf("nccl profiler: NCCL's log %s '%s'\n",
              ours.output.find(loaded) != std::string::npos ? "has" : "LACKS", loaded.c_str());
  EXPECT_NE(ours.output.find(loaded), std::string::npos) << ours.output;
  const Result theirs = RunCommand(
      "NCCL_PROFILER_PLUGIN=none NCCL_DEBUG=INFO "
      "NCCL_DEBUG_SUBSYS=INIT " +
      run);
  ASSERT_EQ(theirs.exit_code, 0) << theirs.output;
  EXPECT_EQ(theirs.output.find(loaded), std::string::npos) << theirs.output;
  const std::string said = "infini_ccl nccl: NCCL_PROFILER_PLUGIN='none' is set";
  const size_t first = theirs.output.find(said);
  EXPECT_NE(first, std::string::npos) << theirs.output;
  EXPECT_EQ(theirs.output.find(said, first + 1), std::string::npos) << theirs.output;
}

// On one GPU too: a send and a recv to itself are a real NCCL plan (a
// collective of one rank is a copy, no algorithm), so ccl_bench's sendrecv
// shows NCCL's point-to-point events as "plugin" events: named, with
// channels and bytes, numbered by the host's calls on their communicator (an
// event not tied to our communicator would be numbered 0 every time).
TEST(Gpt2Gpu, TraceOfSendRecvHasNcclsEventsOnTheirCommunicator) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  const std::string bench = BesideThisTest("ccl_bench");
  if (!std::filesystem::exists(bench)) GTEST_SKIP() << bench << " is not built";
  TemporaryDirectory directory;
  const std::string trace_dir = directory.path() + "/trace";
  const Result run = RunCommand(
      kInfiniRun + " --ccl_backend=nccl --nproc_per_node=1 --trace_dir=" + trace_dir + " " + bench +
      " --collectives=sendrecv --min_bytes=1M --max_bytes=1M --iters=4 "
      "--warmup=1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const infini::testing::Json trace = infini::testing::ReadJsonFile(trace_dir + "/trace.json");
  const auto reported = infini::testing::SpansOf(trace, "plugin");
  const auto lane = reported.find(0);
  const size_t count = lane == reported.end() ? 0 : lane->second.size();
  std::printf("nccl profiler: sendrecv on one GPU: %zu plugin events\n", count);
  size_t sends = 0, recvs = 0;
  double largest_seq = 0;
  for (size_t i = 0; i < count; ++i) {
    const infini::testing::Json& event = *lane->second[i].event;
    const infini::testing::Json& args = event["args"];
    if (i < 12) {
      std::printf("  %s seq=%.0f channels=%.0f bytes=%.0f algorithm=%s\n",
                  event["name"].text.c_str(), args["seq"].number, args["channels"].number,
                  args["bytes"].number, args["algorithm"].text.c_str());
    }
    sends += event["name"].text == "send" ? 1 : 0;
    recvs += event["name"].text == "recv" ? 1 : 0;
    largest_seq = std::max(largest_seq, args["seq"].number);
    EXPECT_GE(args["channels"].number, 1) << "event " << i;
    EXPECT_EQ(args["bytes"].number, 1 << 20) << "event " << i;
  }
  EXPECT_GT(sends, 0u);
  EXPECT_GT(recvs, 0u);
  EXPECT_GT(largest_seq, 0) << "every event numbered 0: not tied to its communicator";
  std::printf("nccl profiler: sendrecv on one GPU: %zu send, %zu recv, largest seq %.0f: %s\n",
              sends, recvs, largest_seq,
              sends > 0 && recvs > 0 && !::testing::Test::HasFailure() ? "PASS" : "FAIL");
}

// Two ranks: every rank's all-reduces have NCCL's algorithm, protocol and
// channels as "plugin" events of their group, each inside its call's "ccl"
// span. Prints what it saw, so that one run diagnoses a failure.
TEST(Gpt2Gpu, TraceNamesNcclsAlgorithmAndProtocolOfEachAllReduce) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs (one rank runs no NCCL algorithm)";
  TemporaryDirectory directory;
  const std::string trace_dir = directory.path() + "/trace";
  const Result run =
      RunCommand(kInfiniRun + " --ccl_backend=nccl --nproc_per_node=2 --trace_dir=" + trace_dir +
                 " " + kGpt2 + " --num_iteration=3 --batch_size=4" + kSmallModel);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const infini::testing::Json trace = infini::testing::ReadJsonFile(trace_dir + "/trace.json");
  const auto calls = infini::testing::SpansOf(trace, "ccl");
  const auto reported = infini::testing::SpansOf(trace, "plugin");
  for (int rank = 0; rank < 2; ++rank) {
    const auto lane = reported.find(rank);
    const size_t count = lane == reported.end() ? 0 : lane->second.size();
    std::printf("nccl profiler: rank %d: %zu plugin events\n", rank, count);
    size_t all_reduces = 0;
    for (size_t i = 0; i < count; ++i) {
      const infini::testing::TraceSpan& span = lane->second[i];
      const infini::testing::Json& args = (*span.event)["args"];
      if (i < 12) {
        std::printf("  %s group=%s seq=%.0f algorithm=%s protocol=%s channels=%.0f bytes=%.0f\n",
                    (*span.event)["name"].text.c_str(), args["group"].text.c_str(),
                    args["seq"].number, args["algorithm"].text.c_str(),
                    args["protocol"].text.c_str(), args["channels"].number, args["bytes"].number);
      }
      if ((*span.event)["name"].text != "all_reduce") continue;
      ++all_reduces;
      EXPECT_FALSE(args["algorithm"].text.empty()) << "rank " << rank << " event " << i;
      EXPECT_TRUE(args["protocol"].text == "LL" || args["protocol"].text == "LL128" ||
                  args["protocol"].text == "SIMPLE")
          << "rank " << rank << " protocol '" << args["protocol"].text << "'";
      EXPECT_GE(args["channels"].number, 1) << "rank " << rank << " event " << i;
      EXPECT_FALSE(args["group"].text.empty()) << "rank " << rank << ": not mapped to a group";
      const infini::testing::TraceSpan* call = infini::testing::HostSpanOf(calls, rank, span);
      EXPECT_NE(call, nullptr) << "rank " << rank << ": no call for seq " << args["seq"].number;
      if (call != nullptr) {
        EXPECT_EQ((*call->event)["name"].text, "all_reduce");
        EXPECT_GE(span.begin_us, call->begin_us);
        EXPECT_LE(span.end_us, call->end_us);
      }
    }
    EXPECT_GT(all_reduces, 0u) << "rank " << rank << " reported no all_reduce";
    std::printf("nccl profiler: rank %d: %zu all_reduce events: %s\n", rank, all_reduces,
                all_reduces > 0 && !::testing::Test::HasFailure() ? "PASS" : "FAIL");
  }
}

// Host-staged communicators (--ccl_backend=gloo --device_backend=nccl): any
// number of ranks share one GPU, each with its own stream, so the GPU
// path's multi-rank behaviour runs on a one-GPU machine.
std::string StagedRanksOnOneGpu(int ranks, const std::string& launcher_flags = "") {
  return "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} " + kInfiniRun +
         " --ccl_backend=gloo --device_backend=nccl --term_timeout=2 --nproc_per_node=" +
         std::to_string(ranks) + launcher_flags + " " + kGpt2;
}

// 4 ranks × micro-batch 1 on one GPU: the device reducer's buckets across
// ranks, trained like one rank × micro-batch 4.
TEST(Gpt2Gpu, FourStagedRanksOnOneGpuTrainLikeOneRank) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  const Result one = RunCommand(kOneGpu + " --batch_size=4 --num_iteration=5" + kSmallModel);
  const Result four =
      RunCommand(StagedRanksOnOneGpu(4) + " --batch_size=1 --num_iteration=5" + kSmallModel);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(four.exit_code, 0) << four.output;
  EXPECT_NE(four.output.find("gradients all-reduced during backward"), std::string::npos)
      << four.output;
  EXPECT_EQ(ParseThroughput(four.output).ranks, 4) << four.output;
  EXPECT_EQ(ParseThroughput(four.output).fields["place"], "gpu") << four.output;
  ExpectSameLosses(StepLosses(one.output), StepLosses(four.output), four.output);
}

// --on_failure=shrink on the CUDA path: rank 1 of 3 is SIGKILLed at step 3;
// the survivors remake their device training (buckets of the new world)
// from rank 0's device state and finish every step with the losses of one
// rank taking the whole global batch.
TEST(Gpt2Gpu, StagedRanksOnOneGpuShrinkInPlaceLikeOneRank) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "needs a GPU";
  const Result reference = RunCommand(kOneGpu + " --batch_size=6 --num_iteration=6" + kSmallModel);
  const Result shrunk =
      RunCommand("INFINI_TEST_GPT2_KILL=1@3 " + StagedRanksOnOneGpu(3, " --on_failure=shrink") +
                 " --batch_size=2 --num_iteration=6" + kSmallModel);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  EXPECT_EQ(shrunk.exit_code, 0) << shrunk.output;
  EXPECT_NE(shrunk.output.find("lost rank(s) 1 at step 3; world now 2 ranks (dp=2); resuming at "
                               "step 3"),
            std::string::npos)
      << shrunk.output;
  EXPECT_EQ(ParseThroughput(shrunk.output).fields["place"], "gpu") << shrunk.output;
  ExpectSameLosses(StepLosses(reference.output), StepLosses(shrunk.output), shrunk.output);
}

// A checkpoint written on one GPU holds the device's weights and AdamW
// moments: resumed on two GPUs (or one, when only one is visible), the run
// continues with the losses of the uninterrupted run.
TEST(Gpt2Gpu, CheckpointOfOneGpuResumesWhereItStopped) {
  const int gpus = VisibleGpus();
  if (gpus < 1) GTEST_SKIP() << "needs a GPU";
  const Result uninterrupted =
      RunCommand(kOneGpu + " --num_iteration=6 --batch_size=4" + kSmallModel);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  TemporaryDirectory directory;
  const std::string checkpoint = " --checkpoint_dir=" + directory.path();
  const Result first =
      RunCommand(kOneGpu + " --num_iteration=3 --batch_size=4" + kSmallModel + checkpoint);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("checkpoint: "), std::string::npos) << first.output;
  const std::string resume_command =
      gpus >= 2 ? kInfiniRun + " --ccl_backend=nccl --nproc_per_node=2 " + kGpt2 + " --batch_size=2"
                : kOneGpu + " --batch_size=4";
  const Result second =
      RunCommand(resume_command + " --num_iteration=6 --resume" + kSmallModel + checkpoint);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resume: "), std::string::npos) << second.output;
  const std::vector<double> all = StepLosses(uninterrupted.output);
  ASSERT_EQ(all.size(), 6u) << uninterrupted.output;
  ExpectSameLosses(std::vector<double>(all.begin() + 3, all.end()), StepLosses(second.output),
                   second.output);
}

}  // namespace
