// The nccl plugin on a machine without a usable GPU (CI): it loads, reports
// zero devices, and every call that needs a device fails with one clear line
// instead of crashing. CUDA_VISIBLE_DEVICES is emptied before CUDA starts, so
// this holds on GPU machines too.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "host_values.h"
#include "infini/ccl/ccl.h"

namespace infini::ccl::nccl_test {
namespace {

constexpr char kNoDeviceText[] = "no CUDA device is visible (CUDA_VISIBLE_DEVICES=''";

std::shared_ptr<const Backend> Nccl() { return Backend::Load("nccl"); }

// Runs `call`, expecting infini::ccl::Error with `code` and the no-device text.
template <typename Call>
void ExpectNoDeviceError(Call&& call, const char* what) {
  try {
    call();
    ADD_FAILURE() << what << " succeeded without a device";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclInvalidUsage) << what << ": " << error.what();
    EXPECT_NE(std::string(error.what()).find(kNoDeviceText), std::string::npos)
        << what << ": " << error.what();
  }
}

TEST(NcclWithoutGpu, PluginLoadsAndReportsZeroDevices) {
  auto backend = Nccl();
  EXPECT_EQ(backend->info().name, "nccl");
  EXPECT_EQ(backend->info().device_type, kDLCUDA);
  EXPECT_EQ(backend->info().version.rfind("NCCL 2.", 0), 0u) << backend->info().version;
  EXPECT_EQ(backend->DeviceCount(), 0);
}

TEST(NcclWithoutGpu, DeviceCallsFailWithClearMessage) {
  auto backend = Nccl();
  ExpectNoDeviceError([&] { backend->SetDevice(0); }, "SetDevice");
  ExpectNoDeviceError([&] { backend->GetDevice(); }, "GetDevice");
  ExpectNoDeviceError([&] { Stream stream(backend); }, "Stream");
  ExpectNoDeviceError([&] { Event event(backend); }, "Event");
  ExpectNoDeviceError([&] { DeviceBuffer buffer(backend, 64); }, "DeviceBuffer");
}

TEST(NcclWithoutGpu, CommunicatorCallsFailWithClearMessage) {
  auto backend = Nccl();
  ExpectNoDeviceError([&] { backend->GetUniqueId(); }, "GetUniqueId");
  ExpectNoDeviceError([&] { backend->CommInitRank(1, UniqueId(), 0); }, "CommInitRank");
}

TEST(NcclWithoutGpu, RawMemoryCallsFailWithClearMessage) {
  const auto& plugin = Nccl()->plugin();
  void* memory = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(plugin.mem_alloc(&memory, 64), infiniCclInvalidUsage);
  EXPECT_EQ(memory, nullptr);
  EXPECT_NE(std::string(plugin.get_last_error()).find(kNoDeviceText), std::string::npos);
  char host[8] = {};
  EXPECT_EQ(plugin.memcpy_async(host, host, sizeof(host), infiniCclMemcpyHostToHost, nullptr),
            infiniCclInvalidUsage);
  EXPECT_EQ(plugin.mem_free(nullptr), infiniCclSuccess);
}

TEST(NcclWithoutGpu, AbiTableIsCompleteAndVersioned) {
  const auto& plugin = Nccl()->plugin();
  EXPECT_EQ(plugin.struct_size, sizeof(infiniCclPlugin_v1_t));
  EXPECT_EQ(plugin.abi_version, static_cast<uint32_t>(INFINI_CCL_PLUGIN_ABI_VERSION));
  // Every entry, the optional ones included (this backend implements all).
  const void* entries[] = {
      reinterpret_cast<const void*>(plugin.all_to_all),
      reinterpret_cast<const void*>(plugin.barrier),
      reinterpret_cast<const void*>(plugin.stream_begin_capture),
      reinterpret_cast<const void*>(plugin.stream_end_capture),
      reinterpret_cast<const void*>(plugin.graph_launch),
      reinterpret_cast<const void*>(plugin.graph_destroy),
      reinterpret_cast<const void*>(plugin.comm_split),
      reinterpret_cast<const void*>(plugin.comm_abort),
  };
  for (const void* entry : entries) EXPECT_NE(entry, nullptr);
}

TEST(NcclWithoutGpu, EveryResultCodeHasAText) {
  const auto& plugin = Nccl()->plugin();
  for (int code = 0; code <= infiniCclNumResults + 3; ++code) {
    const char* text = plugin.get_error_string(static_cast<infiniCclResult_t>(code));
    ASSERT_NE(text, nullptr) << code;
    EXPECT_NE(std::string(text), "") << code;
  }
}

TEST(NcclWithoutGpu, LastErrorIsPerThreadAndEmptyBeforeAnyFailure) {
  const auto& plugin = Nccl()->plugin();
  EXPECT_EQ(plugin.set_device(0), infiniCclInvalidUsage);
  EXPECT_NE(std::string(plugin.get_last_error()), "");
  std::string other_thread_text = "unset";
  std::thread([&] { other_thread_text = plugin.get_last_error(); }).join();
  EXPECT_EQ(other_thread_text, "");
}

TEST(NcclWithoutGpu, CollectivesOnNullCommunicatorAreRefused) {
  const auto& plugin = Nccl()->plugin();
  const DLDataType float32{kDLFloat, 32, 1};
  EXPECT_EQ(plugin.all_reduce(nullptr, nullptr, 1, float32, infiniCclSum, nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_NE(std::string(plugin.get_last_error()).find("communicator is NULL"), std::string::npos)
      << plugin.get_last_error();
  EXPECT_EQ(plugin.barrier(nullptr, nullptr), infiniCclInvalidArgument);
  EXPECT_EQ(plugin.all_to_all(nullptr, nullptr, 1, float32, nullptr, nullptr),
            infiniCclInvalidArgument);
}

TEST(NcclWithoutGpu, ReductionOfTypeNcclLacksIsUnsupportedAndNamesTheType) {
  const auto& plugin = Nccl()->plugin();
  const DLDataType int16{kDLInt, 16, 1};
  EXPECT_EQ(plugin.all_reduce(nullptr, nullptr, 1, int16, infiniCclSum, nullptr, nullptr),
            infiniCclUnsupported);
  EXPECT_NE(std::string(plugin.get_last_error()).find("int16"), std::string::npos)
      << plugin.get_last_error();
  // Moving int16 does not need arithmetic: it passes the type check and
  // stops at the missing communicator.
  EXPECT_EQ(plugin.broadcast(nullptr, nullptr, 1, int16, 0, nullptr, nullptr),
            infiniCclInvalidArgument);
}

TEST(NcclWithoutGpu, UnknownReductionOperatorIsRefused) {
  const auto& plugin = Nccl()->plugin();
  EXPECT_EQ(plugin.all_reduce(nullptr, nullptr, 1, DLDataType{kDLFloat, 32, 1},
                              static_cast<infiniCclRedOp_t>(17), nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_NE(std::string(plugin.get_last_error()).find("17"), std::string::npos);
}

// The GPU tests' host reference depends on these encodings.
TEST(HostReferenceEncoding, SmallFloatsHaveTheirStandardBitPatterns) {
  struct Known {
    DLDataType dtype;
    double value;
    unsigned bits;
  };
  const Known known[] = {
      {{kDLFloat, 16, 1}, 1.0, 0x3C00},
      {{kDLFloat, 16, 1}, -2.5, 0xC100},
      {{kDLBfloat, 16, 1}, 1.0, 0x3F80},
      {{kDLBfloat, 16, 1}, 3.0, 0x4040},
      {{INFINI_CCL_DL_FLOAT8_E4M3FN, 8, 1}, 1.0, 0x38},
      {{INFINI_CCL_DL_FLOAT8_E4M3FN, 8, 1}, 448.0, 0x7E},
      {{INFINI_CCL_DL_FLOAT8_E5M2, 8, 1}, 1.0, 0x3C},
      {{INFINI_CCL_DL_FLOAT8_E5M2, 8, 1}, 6.0, 0x46},
  };
  for (const Known& entry : known) {
    unsigned char element[2] = {};
    Encode(entry.dtype, entry.value, element);
    const unsigned bits = entry.dtype.bits == 16 ? element[0] | (element[1] << 8) : element[0];
    EXPECT_EQ(bits, entry.bits) << entry.value;
    EXPECT_EQ(Decode(entry.dtype, element), entry.value);
  }
}

TEST(HostReferenceEncoding, IntegersWrapLikeTheDevice) {
  unsigned char element[8] = {};
  Encode(DLDataType{kDLInt, 8, 1}, 256.0, element);
  EXPECT_EQ(Decode(DLDataType{kDLInt, 8, 1}, element), 0.0);
  Encode(DLDataType{kDLUInt, 8, 1}, 200.0, element);
  EXPECT_EQ(Decode(DLDataType{kDLUInt, 8, 1}, element), 200.0);
}

}  // namespace
}  // namespace infini::ccl::nccl_test

int main(int argc, char** argv) {
  // Before anything starts CUDA: this test is about a process that sees no
  // device, whatever the machine has.
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
