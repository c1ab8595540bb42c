// The nccl plugin as NCCL's profiler (docs/tracing.md, "Events a plugin
// reports"), without a GPU: the test plays both sides, the host (it sets the
// plugin's infiniCclProfiler_v1 callback) and NCCL (it calls the plugin's
// ncclProfiler_v5 with the descriptors NCCL 2.28 hands a profiler). What a
// real NCCL does with it is the GPU test's (Gpt2Gpu.TraceNamesNccls...).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "infini/ccl/plugin_profiler_v1.h"
#include "nccl_profiler_v5.h"

namespace {

namespace v5 = infini::ccl::nccl::profiler_v5;

struct Seen {
  std::string name, algorithm, protocol;
  int channels = -1;
  uint64_t bytes = 0, seq = 0;
  int64_t start_ns = 0, end_ns = 0;
  const void* comm = nullptr;
};
std::vector<Seen> g_seen;

extern "C" void Collect(void* /*context*/, const infiniCclProfilerEvent_v1_t* event) {
  g_seen.push_back({event->name != nullptr ? event->name : "",
                    event->algorithm != nullptr ? event->algorithm : "(none)",
                    event->protocol != nullptr ? event->protocol : "(none)", event->channels,
                    event->bytes, event->seq, event->start_ns, event->end_ns, event->comm});
}

// lib/ beside this test's bin/, as the loader finds plugins: GPU builds are
// carried to another machine (scripts/gpu_check.sh), so not the path of the
// machine that compiled it.
std::string PluginPath() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "lib" /
          NCCL_PLUGIN_FILE_NAME)
      .string();
}

class NcclProfilerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    library_ = dlopen(PluginPath().c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library_, nullptr) << dlerror();
    host_side_ =
        static_cast<const infiniCclProfiler_v1_t*>(dlsym(library_, INFINI_CCL_PROFILER_SYMBOL_V1));
    nccl_side_ = static_cast<const v5::Profiler*>(dlsym(library_, v5::kSymbol));
  }
  void SetUp() override {
    ASSERT_NE(host_side_, nullptr) << "the plugin exports no " << INFINI_CCL_PROFILER_SYMBOL_V1;
    ASSERT_NE(nccl_side_, nullptr) << "the plugin exports no " << v5::kSymbol;
    unsetenv(v5::kPluginVariable);
    g_seen.clear();
  }
  void TearDown() override { host_side_->set_callback(nullptr, nullptr); }

  // Sets the host's callback with stderr captured; returns what was said.
  static std::string SetCallbackSaying() {
    char path[] = "/tmp/nccl_profiler_test_XXXXXX";
    const int capture = mkstemp(path);
    const int saved = dup(STDERR_FILENO);
    dup2(capture, STDERR_FILENO);
    EXPECT_EQ(host_side_->set_callback(&Collect, nullptr), infiniCclSuccess);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(capture);
    std::ifstream file(path);
    std::stringstream said;
    said << file.rdbuf();
    unlink(path);
    return said.str();
  }

  static void* library_;
  static const infiniCclProfiler_v1_t* host_side_;
  static const v5::Profiler* nccl_side_;
};
void* NcclProfilerTest::library_ = nullptr;
const infiniCclProfiler_v1_t* NcclProfilerTest::host_side_ = nullptr;
const v5::Profiler* NcclProfilerTest::nccl_side_ = nullptr;

TEST_F(NcclProfilerTest, TracingPointsNcclAtThePluginItself) {
  EXPECT_EQ(SetCallbackSaying(), "");
  char plugin[PATH_MAX];
  ASSERT_NE(realpath(PluginPath().c_str(), plugin), nullptr);
  const char* chosen = std::getenv(v5::kPluginVariable);
  ASSERT_NE(chosen, nullptr);
  EXPECT_EQ(std::string(chosen), plugin);
  EXPECT_STREQ(nccl_side_->name, "infini_ccl_nccl");
}

TEST_F(NcclProfilerTest, AProfilerTheUserChoseIsLeftAloneAndSaidOnce) {
  setenv(v5::kPluginVariable, "/opt/their/libnccl-profiler.so", 1);
  const std::string said = SetCallbackSaying();
  EXPECT_STREQ(std::getenv(v5::kPluginVariable), "/opt/their/libnccl-profiler.so");
  EXPECT_EQ(said,
            "infini_ccl nccl: NCCL_PROFILER_PLUGIN='/opt/their/libnccl-profiler.so' is set (the "
            "user's choice of NCCL profiler, kept), so the trace has no NCCL algorithm, protocol "
            "or channel events (unset it to have them)\n");
}

TEST_F(NcclProfilerTest, ACollectiveBecomesAnEventWithNcclsAlgorithmProtocolAndChannels) {
  SetCallbackSaying();
  void* context = nullptr;
  int mask = 0;
  ASSERT_EQ(nccl_side_->init(&context, 42, &mask, nullptr, 1, 2, 0, nullptr), v5::kSuccess);
  EXPECT_EQ(static_cast<uint64_t>(mask), v5::kProfileColl | v5::kProfileP2p);
  ASSERT_NE(context, nullptr);

  v5::EventDescription coll{};
  coll.type = v5::kProfileColl;
  coll.coll.func = "AllReduce";
  coll.coll.count = 256;
  coll.coll.datatype = "ncclFloat32";
  coll.coll.nChannels = 4;
  coll.coll.algo = "RING";
  coll.coll.proto = "LL128";
  void* handle = nullptr;
  ASSERT_EQ(nccl_side_->startEvent(context, &handle, &coll), v5::kSuccess);
  ASSERT_NE(handle, nullptr);
  EXPECT_EQ(nccl_side_->recordEventState(handle, 0, nullptr), v5::kSuccess);
  EXPECT_TRUE(g_seen.empty()) << "reported before NCCL stopped it";
  ASSERT_EQ(nccl_side_->stopEvent(handle), v5::kSuccess);

  v5::EventDescription p2p{};
  p2p.type = v5::kProfileP2p;
  p2p.p2p.func = "Send";
  p2p.p2p.count = 10;
  p2p.p2p.datatype = "ncclBfloat16";
  p2p.p2p.nChannels = 2;
  ASSERT_EQ(nccl_side_->startEvent(context, &handle, &p2p), v5::kSuccess);
  ASSERT_EQ(nccl_side_->stopEvent(handle), v5::kSuccess);

  // Events we did not ask for get no handle (NCCL then stops nothing).
  v5::EventDescription group{};
  group.type = 1;  // ncclProfileGroup
  ASSERT_EQ(nccl_side_->startEvent(context, &handle, &group), v5::kSuccess);
  EXPECT_EQ(handle, nullptr);
  EXPECT_EQ(nccl_side_->finalize(context), v5::kSuccess);

  ASSERT_EQ(g_seen.size(), 2u);
  const Seen& all_reduce = g_seen[0];
  EXPECT_EQ(all_reduce.name, "all_reduce");
  EXPECT_EQ(all_reduce.algorithm, "RING");
  EXPECT_EQ(all_reduce.protocol, "LL128");
  EXPECT_EQ(all_reduce.channels, 4);
  EXPECT_EQ(all_reduce.bytes, 1024u);
  EXPECT_EQ(all_reduce.seq, INFINI_CCL_PROFILER_SEQ_HOST);
  EXPECT_GT(all_reduce.start_ns, 0);
  EXPECT_LE(all_reduce.start_ns, all_reduce.end_ns);
  EXPECT_EQ(all_reduce.comm, nullptr);  // no communicator was named commName
  const Seen& send = g_seen[1];
  EXPECT_EQ(send.name, "send");
  EXPECT_EQ(send.algorithm, "(none)");
  EXPECT_EQ(send.protocol, "(none)");
  EXPECT_EQ(send.channels, 2);
  EXPECT_EQ(send.bytes, 20u);
}

TEST_F(NcclProfilerTest, WithoutTheHostsCallbackNcclGetsNoEventsToReport) {
  void* context = &context;
  int mask = -1;
  ASSERT_EQ(nccl_side_->init(&context, 42, &mask, "world", 1, 2, 0, nullptr), v5::kSuccess);
  EXPECT_EQ(mask, 0);
  EXPECT_EQ(context, nullptr);
  EXPECT_EQ(std::getenv(v5::kPluginVariable), nullptr);
}

}  // namespace
