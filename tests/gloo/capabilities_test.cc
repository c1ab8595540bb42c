// What the gloo backend declares (features, supports(), device description)
// and the configuration it honours or refuses (ABI v2 config and vendor
// options).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rank_runner.h"
#include "reference_buffers.h"

namespace infini::gloo_test {
namespace {

using ccl::Collective;

bool IsReducibleType(DLDataType dtype) {
  for (DLDataType reducible : ReducibleTypes()) {
    if (ccl::operator==(reducible, dtype)) return true;
  }
  return false;
}

TEST(GlooCapabilities, DeclaresTheHostDeviceAndTheFeaturesItHonours) {
  const auto& backend = GlooBackend();
  const ccl::BackendInfo& info = backend->info();
  EXPECT_EQ(info.abi_version, 2u);
  EXPECT_EQ(info.device_type, kDLCPU);
  EXPECT_EQ(info.device_vendor, "host");
  EXPECT_EQ(info.device_kind, "CPU");
  EXPECT_EQ(info.visible_devices_env, "");
  EXPECT_GE(info.unique_id_bytes, 16u + 8u);
  const ccl::Capabilities& caps = backend->capabilities();
  EXPECT_TRUE(caps.concurrent_init());
  EXPECT_TRUE(caps.abort_unblocks());
  EXPECT_TRUE(caps.device_sharing());
  EXPECT_FALSE(caps.nonblocking()) << "every gloo call completes before it returns";
  EXPECT_FALSE(caps.capture());
  EXPECT_TRUE(caps.split() && caps.abort() && caps.group());
  EXPECT_TRUE(caps.init_rank() && caps.multi_device_init());
}

TEST(GlooCapabilities, SupportsTenTypesForReductionsAndEveryKnownTypeForDataMovement) {
  const ccl::Capabilities& caps = GlooBackend()->capabilities();
  for (int c = 0; c < ccl::kNumCollectives; ++c) {
    const auto collective = static_cast<Collective>(c);
    EXPECT_TRUE(caps.Implements(collective)) << ccl::CollectiveName(collective);
    for (int t = 0; t < ccl::kNumKnownDataTypes; ++t) {
      const DLDataType dtype = ccl::KnownDataType(t);
      for (int o = 0; o < ccl::kNumReduceOps; ++o) {
        const auto op = static_cast<ccl::ReduceOp>(o);
        const bool expected = !ccl::IsReduction(collective) || IsReducibleType(dtype);
        EXPECT_EQ(caps.Supports(collective, dtype, op), expected)
            << ccl::CollectiveName(collective) << " " << ccl::DataTypeName(dtype) << " "
            << ccl::ReduceOpName(op);
      }
    }
  }
}

TEST(GlooCapabilities, UndeclaredReductionIsRefusedBeforeThePlugin) {
  RunRanks(Launch::kThreads, 1, [](ccl::Communicator& comm) {
    ccl::DeviceBuffer buffer(comm.backend(), 4);
    const DLDataType boolean{INFINI_CCL_DL_BOOL, 8, 1};
    try {
      comm.AllReduce(buffer.AsTensor(boolean, 4), buffer.AsTensor(boolean, 4), ccl::ReduceOp::kMax);
      ADD_FAILURE() << "an all_reduce of bool was accepted";
    } catch (const ccl::Error& e) {
      EXPECT_EQ(e.code(), infiniCclUnsupported) << e.what();
    }
    // Moving bools is declared, and works.
    comm.Broadcast(buffer.AsTensor(boolean, 4), buffer.AsTensor(boolean, 4), 0);
  });
}

// The error of a one-rank init with `config`, or "" when it succeeds.
std::string InitError(const ccl::CommConfig& config, infiniCclResult_t* code) {
  const ccl::UniqueId id = GlooBackend()->GetUniqueId();
  try {
    GlooBackend()->CommInitRank(1, id, 0, config);
    return "";
  } catch (const ccl::Error& e) {
    *code = e.code();
    return e.what();
  }
}

TEST(GlooConfig, UnknownGlooVendorOptionIsRefusedNamingKeyValueAndKnownKeys) {
  ccl::CommConfig config;
  config.vendor_options = {{"gloo", "buffer_mb", "64"}};
  infiniCclResult_t code = infiniCclSuccess;
  const std::string error = InitError(config, &code);
  EXPECT_EQ(code, infiniCclInvalidUsage);
  for (const char* part : {"buffer_mb", "'64'", "known keys: socket_ifname"}) {
    EXPECT_NE(error.find(part), std::string::npos) << part << " missing from: " << error;
  }
}

TEST(GlooConfig, OtherBackendsOptionsAreSkippedAndSocketInterfaceIsApplied) {
  ccl::CommConfig config;
  config.timeout_ms = 60000;
  config.vendor_options = {{"nccl", "max_ctas", "16"}, {"gloo", "socket_ifname", "lo"}};
  RunRanks(
      Launch::kThreads, 2, [](ccl::Communicator& comm) { comm.Barrier(); }, config);

  config.vendor_options = {{"gloo", "socket_ifname", "nosuchif0"}};
  infiniCclResult_t code = infiniCclSuccess;
  const std::string error = InitError(config, &code);
  EXPECT_EQ(code, infiniCclInvalidUsage);
  EXPECT_NE(error.find("gloo:socket_ifname=nosuchif0"), std::string::npos) << error;
}

TEST(GlooConfig, NonBlockingAndNonPositiveTimeoutAreRefusedNamingTheField) {
  ccl::CommConfig nonblocking;
  nonblocking.blocking = false;
  infiniCclResult_t code = infiniCclSuccess;
  std::string error = InitError(nonblocking, &code);
  EXPECT_EQ(code, infiniCclInvalidUsage);
  EXPECT_NE(error.find("config.blocking=0"), std::string::npos) << error;

  ccl::CommConfig zero_timeout;
  zero_timeout.timeout_ms = 0;
  code = infiniCclSuccess;
  error = InitError(zero_timeout, &code);
  EXPECT_EQ(code, infiniCclInvalidUsage);
  EXPECT_NE(error.find("config.timeout_ms=0"), std::string::npos) << error;
}

}  // namespace
}  // namespace infini::gloo_test
