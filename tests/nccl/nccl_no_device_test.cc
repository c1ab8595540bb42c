// The nccl plugin on a machine without a usable GPU (CI): its v2 table
// loads, describes the device and declares its capabilities, reports zero
// devices, refuses bad configs, and every call that needs a device fails with
// one clear line instead of crashing. CUDA_VISIBLE_DEVICES is emptied before
// CUDA starts, so this holds on GPU machines too.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/capabilities.h"
#include "infini/ccl/ccl.h"
#include "infini/ccl/dtype.h"
#include "infini/ccl/plugin_table.h"
#include "infini/conformance/reference.h"

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

// A UniqueId of the size the plugin declares (contents do not matter when
// the call fails before NCCL reads it).
UniqueId NcclSizedId() { return UniqueId(std::string(128, '\0')); }

TEST(NcclWithoutGpu, PluginLoadsAndReportsZeroDevices) {
  auto backend = Nccl();
  EXPECT_EQ(backend->info().name, "nccl");
  EXPECT_EQ(backend->info().version.rfind("NCCL 2.", 0), 0u) << backend->info().version;
  EXPECT_EQ(backend->DeviceCount(), 0);
}

TEST(NcclWithoutGpu, DescribesItsDevicesAndUniqueId) {
  const BackendInfo& info = Nccl()->info();
  EXPECT_EQ(info.abi_version, 2u);
  EXPECT_EQ(info.device_type, kDLCUDA);
  EXPECT_EQ(info.device_vendor, "NVIDIA");
  EXPECT_EQ(info.device_kind, "GPU");
  EXPECT_EQ(info.visible_devices_env, "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(info.unique_id_bytes, 128u);  // sizeof(ncclUniqueId)
}

// The library itself: the v2 symbol, complete, and no v1 symbol (the host
// adapts v1 plugins; this one is v2 only).
TEST(NcclWithoutGpu, ExportsTheV2TableOnly) {
  const std::string& path = Nccl()->info().library_path;
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr) << path << ": " << dlerror();
  const auto* table =
      static_cast<const infiniCclPlugin_t*>(dlsym(library, INFINI_CCL_PLUGIN_SYMBOL_V2));
  ASSERT_NE(table, nullptr) << dlerror();
  EXPECT_EQ(table->struct_size, sizeof(infiniCclPlugin_t));
  EXPECT_EQ(table->abi_version, static_cast<uint32_t>(INFINI_CCL_PLUGIN_ABI_VERSION_V2));
  EXPECT_STREQ(table->name, "nccl");
  EXPECT_EQ(dlsym(library, INFINI_CCL_PLUGIN_SYMBOL_V1), nullptr);
  dlclose(library);
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
  const std::vector<int> zero = {0};
  ExpectNoDeviceError([&] { backend->GetUniqueId(); }, "GetUniqueId");
  ExpectNoDeviceError([&] { backend->CommInitRank(1, NcclSizedId(), 0); }, "CommInitRank");
  ExpectNoDeviceError([&] { backend->CommInitRanks(1, NcclSizedId(), zero, zero); },
                      "CommInitRanks");
  ExpectNoDeviceError([&] { backend->CommInitAll(zero); }, "CommInitAll");
}

TEST(NcclWithoutGpu, RawMemoryCallsFailWithClearMessage) {
  const auto& plugin = PluginTable(*Nccl());
  void* memory = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(plugin.mem_alloc(&memory, 64), infiniCclInvalidUsage);
  EXPECT_EQ(memory, nullptr);
  EXPECT_NE(std::string(plugin.get_last_error()).find(kNoDeviceText), std::string::npos);
  char host[8] = {};
  EXPECT_EQ(plugin.memcpy_async(host, host, sizeof(host), infiniCclMemcpyHostToHost, nullptr),
            infiniCclInvalidUsage);
  EXPECT_EQ(plugin.mem_free(nullptr), infiniCclSuccess);
}

TEST(NcclWithoutGpu, EveryOptionalEntryIsImplemented) {
  const auto& plugin = PluginTable(*Nccl());
  const void* entries[] = {
      reinterpret_cast<const void*>(plugin.comm_init_rank),
      reinterpret_cast<const void*>(plugin.comm_init_ranks),
      reinterpret_cast<const void*>(plugin.comm_split),
      reinterpret_cast<const void*>(plugin.comm_abort),
      reinterpret_cast<const void*>(plugin.group_start),
      reinterpret_cast<const void*>(plugin.group_end),
      reinterpret_cast<const void*>(plugin.all_to_all),
      reinterpret_cast<const void*>(plugin.barrier),
      reinterpret_cast<const void*>(plugin.all_to_all_v),
      reinterpret_cast<const void*>(plugin.all_gather_v),
      reinterpret_cast<const void*>(plugin.reduce_scatter_v),
      reinterpret_cast<const void*>(plugin.gather),
      reinterpret_cast<const void*>(plugin.scatter),
      reinterpret_cast<const void*>(plugin.stream_begin_capture),
      reinterpret_cast<const void*>(plugin.stream_end_capture),
      reinterpret_cast<const void*>(plugin.graph_launch),
      reinterpret_cast<const void*>(plugin.graph_destroy),
  };
  for (const void* entry : entries) EXPECT_NE(entry, nullptr);
}

// ncclCommShrink came with NCCL 2.27, ncclCommRevoke with 2.28: offered
// exactly where the library this process runs with has them.
TEST(NcclWithoutGpu, RecoveryEntriesAreOfferedWhereTheRunningNcclHasThem) {
  const std::string& version = Nccl()->info().version;  // "NCCL 2.28.9, CUDA runtime ..."
  int major = 0, minor = 0;
  ASSERT_EQ(std::sscanf(version.c_str(), "NCCL %d.%d", &major, &minor), 2) << version;
  const int release = major * 100 + minor;
  EXPECT_EQ(Nccl()->capabilities().shrink(), release >= 227) << version;
  EXPECT_EQ(Nccl()->capabilities().revoke(), release >= 228) << version;
  EXPECT_EQ(Nccl()->capabilities().register_buffers(), release >= 219) << version;
  EXPECT_EQ(Nccl()->capabilities().register_windows(), release >= 227) << version;
}

// get_link_bandwidth is always offered (NVML is looked for when it is
// called); without a device it fails as the other device calls do, and a
// description shorter than the plugin's is refused.
TEST(NcclWithoutGpu, LinkBandwidthNeedsADeviceAndAWholeDescription) {
  const auto& plugin = PluginTable(*Nccl());
  ASSERT_NE(plugin.get_link_bandwidth, nullptr);
  EXPECT_TRUE(Nccl()->capabilities().link_bandwidth());
  infiniCclLinkBandwidth_t link{};
  link.struct_size = sizeof(link);
  EXPECT_EQ(plugin.get_link_bandwidth(0, &link), infiniCclInvalidUsage);
  EXPECT_NE(std::string(plugin.get_last_error()).find(kNoDeviceText), std::string::npos);
  link.struct_size = sizeof(size_t);
  EXPECT_EQ(plugin.get_link_bandwidth(0, &link), infiniCclInvalidArgument);
}

// ---- Capabilities: what the host asks once, at load --------------------------

bool IsBoolType(DLDataType dtype) { return dtype.code == INFINI_CCL_DL_BOOL && dtype.bits == 8; }

bool IsFloat8Type(DLDataType dtype) {
  return dtype.bits == 8 &&
         (dtype.code == INFINI_CCL_DL_FLOAT8_E4M3FN || dtype.code == INFINI_CCL_DL_FLOAT8_E5M2);
}

// What NCCL 2.28 does: every NCCL type reduces with every operator but fp8
// with avg (ncclInvalidArgument on 2.28.3), bool with max and min (as
// uint8); int16 and uint16, which NCCL lacks, do not reduce; every type
// moves (int16 as bytes).
bool ExpectedSupport(Collective collective, DLDataType dtype, ReduceOp op) {
  if (!IsReduction(collective)) return true;
  if (IsBoolType(dtype)) return op == ReduceOp::kMax || op == ReduceOp::kMin;
  if (IsFloat8Type(dtype)) return op != ReduceOp::kAvg;
  return dtype.bits != 16 || (dtype.code != kDLInt && dtype.code != kDLUInt);
}

TEST(NcclWithoutGpu, CapabilitiesAreNcclsForEveryCollectiveTypeAndOperator) {
  const Capabilities& capabilities = Nccl()->capabilities();
  for (int c = 0; c < kNumCollectives; ++c) {
    const auto collective = static_cast<Collective>(c);
    EXPECT_TRUE(capabilities.Implements(collective)) << CollectiveName(collective);
    for (int t = 0; t < kNumKnownDataTypes; ++t) {
      const DLDataType dtype = KnownDataType(t);
      for (int o = 0; o < kNumReduceOps; ++o) {
        const auto op = static_cast<ReduceOp>(o);
        EXPECT_EQ(capabilities.Supports(collective, dtype, op),
                  ExpectedSupport(collective, dtype, op))
            << CollectiveName(collective) << " " << DataTypeName(dtype) << " " << ReduceOpName(op);
      }
    }
  }
  EXPECT_TRUE(capabilities.Supports(Collective::kAllReduce, dtype::kBFloat16, ReduceOp::kAvg));
  EXPECT_TRUE(capabilities.nonblocking());
  EXPECT_TRUE(capabilities.concurrent_init());
  EXPECT_TRUE(capabilities.abort_unblocks());
  EXPECT_FALSE(capabilities.device_sharing()) << "NCCL refuses two ranks on one GPU";
  EXPECT_TRUE(capabilities.split());
  EXPECT_TRUE(capabilities.abort());
  EXPECT_TRUE(capabilities.group());
  EXPECT_TRUE(capabilities.capture());
  EXPECT_TRUE(capabilities.init_rank());
  EXPECT_TRUE(capabilities.multi_device_init());
}

// Types the C++ API does not name reach supports() through the raw table.
TEST(NcclWithoutGpu, SupportsAnswersForTypesBeyondTheNamedOnes) {
  const auto& plugin = PluginTable(*Nccl());
  const DLDataType int16{kDLInt, 16, 1};
  const DLDataType float32x2{kDLFloat, 32, 2};
  const DLDataType int4{kDLInt, 4, 1};
  EXPECT_EQ(plugin.supports(infiniCclCollBroadcast, int16, infiniCclSum), 1);
  EXPECT_EQ(plugin.supports(infiniCclCollAllToAllV, float32x2, infiniCclSum), 1);
  EXPECT_EQ(plugin.supports(infiniCclCollAllReduce, int16, infiniCclSum), 0);
  EXPECT_EQ(plugin.supports(infiniCclCollGather, int4, infiniCclSum), 0) << "half a byte";
  EXPECT_EQ(
      plugin.supports(infiniCclCollAllReduce, dtype::kFloat32, static_cast<infiniCclRedOp_t>(17)),
      0);
  EXPECT_EQ(plugin.supports(static_cast<infiniCclCollective_t>(99), dtype::kFloat32, infiniCclSum),
            0);
}

// ---- Config: vendor options are checked before any device is needed ------

// CommInitRank with `options`, expecting infiniCclInvalidUsage whose text
// contains every one of `needles`.
void ExpectOptionsRefused(const std::vector<VendorOption>& options,
                          const std::vector<std::string>& needles) {
  CommConfig config;
  config.vendor_options = options;
  try {
    Nccl()->CommInitRank(1, NcclSizedId(), 0, config);
    ADD_FAILURE() << "options accepted";
  } catch (const Error& error) {
    const std::string text = error.what();
    EXPECT_EQ(error.code(), infiniCclInvalidUsage) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << "not one line: " << text;
    for (const std::string& needle : needles) {
      EXPECT_NE(text.find(needle), std::string::npos) << "'" << needle << "' not in: " << text;
    }
  }
}

TEST(NcclWithoutGpu, BadVendorOptionIsRefusedNamingKeyValueAndExpectation) {
  ExpectOptionsRefused({{"nccl", "max_ctas", "lots"}},
                       {"max_ctas", "'lots'", "expected an integer >= 1", "min_ctas", "net_name"});
  ExpectOptionsRefused({{"nccl", "max_ctas", "0"}}, {"max_ctas", "'0'"});
  ExpectOptionsRefused({{"nccl", "max_ctas", "4x"}}, {"'4x'"});
  ExpectOptionsRefused({{"nccl", "split_share", "2"}}, {"split_share", "expected 0 or 1"});
  ExpectOptionsRefused({{"nccl", "cga_cluster_size", "99999999999"}},
                       {"cga_cluster_size", "[0, 8]"});
  ExpectOptionsRefused({{"nccl", "cta_policy", "3"}}, {"cta_policy", "efficiency"});
  ExpectOptionsRefused({{"nccl", "net_name", ""}}, {"net_name"});
  ExpectOptionsRefused({{"nccl", "no_such_knob", "1"}},
                       {"'no_such_knob'", "expected a known key", "max_ctas"});
  ExpectOptionsRefused({{"nccl", "min_ctas", "8"}, {"nccl", "max_ctas", "4"}},
                       {"min_ctas=8", "max_ctas=4", "min_ctas <= max_ctas"});
}

// Accepted options get as far as the device check: the only failure left.
TEST(NcclWithoutGpu, GoodOptionsAndOtherBackendsOptionsPassTheConfigCheck) {
  auto backend = Nccl();
  CommConfig config;
  config.blocking = false;
  config.timeout_ms = 5000;
  config.stream_priority = -1;
  config.vendor_options = {{"nccl", "min_ctas", "2"},         {"nccl", "max_ctas", "8"},
                           {"nccl", "cga_cluster_size", "4"}, {"nccl", "net_name", "Socket"},
                           {"nccl", "cta_policy", "2"},       {"gloo", "no_such_knob", "x"},
                           {"hccl", "buffer_size_mb", "200"}};
  ExpectNoDeviceError([&] { backend->CommInitRank(1, NcclSizedId(), 0, config); },
                      "CommInitRank with good options");
}

// The raw chain: an extension of a type the plugin does not know is
// skipped; a chain that loops is refused instead of walked forever.
TEST(NcclWithoutGpu, ExtensionChainSkipsUnknownTypesAndRefusesCycles) {
  const auto& plugin = PluginTable(*Nccl());
  const char* keys[] = {"max_ctas"};
  const char* values[] = {"many"};
  infiniCclVendorOptions_t vendor{};
  vendor.base.struct_size = sizeof(vendor);
  vendor.base.type = infiniCclExtensionVendorOptions;
  vendor.backend = "nccl";
  vendor.count = 1;
  vendor.keys = keys;
  vendor.values = values;
  infiniCclExtension_t unknown{sizeof(infiniCclExtension_t),
                               static_cast<infiniCclExtensionType_t>(99), &vendor.base};
  infiniCclConfig_t config = INFINI_CCL_CONFIG_INITIALIZER;
  config.extensions = &unknown;
  const std::string id(128, '\0');
  infiniCclComm_t comm = nullptr;
  EXPECT_EQ(plugin.comm_init_rank(&comm, 1, id.data(), 0, &config, nullptr), infiniCclInvalidUsage);
  EXPECT_NE(std::string(plugin.get_last_error()).find("'many'"), std::string::npos)
      << plugin.get_last_error();
  EXPECT_EQ(comm, nullptr);

  infiniCclExtension_t loop{sizeof(infiniCclExtension_t), static_cast<infiniCclExtensionType_t>(99),
                            nullptr};
  loop.next = &loop;
  config.extensions = &loop;
  EXPECT_EQ(plugin.comm_init_rank(&comm, 1, id.data(), 0, &config, nullptr),
            infiniCclInvalidArgument);
  EXPECT_NE(std::string(plugin.get_last_error()).find("malformed"), std::string::npos)
      << plugin.get_last_error();
}

TEST(NcclWithoutGpu, EveryResultCodeHasAText) {
  const auto& plugin = PluginTable(*Nccl());
  for (int code = 0; code <= infiniCclNumResults + 3; ++code) {
    const char* text = plugin.get_error_string(static_cast<infiniCclResult_t>(code));
    ASSERT_NE(text, nullptr) << code;
    EXPECT_NE(std::string(text), "") << code;
  }
}

TEST(NcclWithoutGpu, LastErrorIsPerThreadAndEmptyBeforeAnyFailure) {
  const auto& plugin = PluginTable(*Nccl());
  EXPECT_EQ(plugin.set_device(0), infiniCclInvalidUsage);
  EXPECT_NE(std::string(plugin.get_last_error()), "");
  std::string other_thread_text = "unset";
  std::thread([&] { other_thread_text = plugin.get_last_error(); }).join();
  EXPECT_EQ(other_thread_text, "");
}

TEST(NcclWithoutGpu, CollectivesOnNullCommunicatorAreRefused) {
  const auto& plugin = PluginTable(*Nccl());
  const DLDataType float32{kDLFloat, 32, 1};
  EXPECT_EQ(plugin.all_reduce(nullptr, nullptr, 1, float32, infiniCclSum, nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_NE(std::string(plugin.get_last_error()).find("communicator is NULL"), std::string::npos)
      << plugin.get_last_error();
  EXPECT_EQ(plugin.barrier(nullptr, nullptr), infiniCclInvalidArgument);
  EXPECT_EQ(plugin.all_to_all(nullptr, nullptr, 1, float32, nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_EQ(plugin.gather(nullptr, nullptr, 1, float32, 0, nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_EQ(plugin.scatter(nullptr, nullptr, 1, float32, 0, nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_NE(std::string(plugin.get_last_error()).find("communicator is NULL"), std::string::npos)
      << plugin.get_last_error();
}

TEST(NcclWithoutGpu, VariableCollectivesRefuseNullCountArrays) {
  const auto& plugin = PluginTable(*Nccl());
  const DLDataType float32{kDLFloat, 32, 1};
  const size_t counts[1] = {1};
  EXPECT_EQ(plugin.all_to_all_v(nullptr, counts, counts, nullptr, nullptr, counts, float32, nullptr,
                                nullptr),
            infiniCclInvalidArgument);
  EXPECT_NE(std::string(plugin.get_last_error()).find("must not be NULL"), std::string::npos)
      << plugin.get_last_error();
  EXPECT_EQ(plugin.all_gather_v(nullptr, 1, nullptr, counts, nullptr, float32, nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_NE(std::string(plugin.get_last_error()).find("rdispls"), std::string::npos)
      << plugin.get_last_error();
  EXPECT_EQ(plugin.reduce_scatter_v(nullptr, nullptr, counts, nullptr, 1, float32, infiniCclSum,
                                    nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_NE(std::string(plugin.get_last_error()).find("sendcounts"), std::string::npos)
      << plugin.get_last_error();
  // Arrays given: the next check is the communicator's.
  EXPECT_EQ(plugin.all_gather_v(nullptr, 1, nullptr, counts, counts, float32, nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_NE(std::string(plugin.get_last_error()).find("communicator is NULL"), std::string::npos)
      << plugin.get_last_error();
}

TEST(NcclWithoutGpu, CommunicatorEntriesCheckTheirArguments) {
  const auto& plugin = PluginTable(*Nccl());
  infiniCclResult_t state = infiniCclSuccess;
  const char* message = nullptr;
  EXPECT_EQ(plugin.comm_get_async_error(nullptr, &state, &message), infiniCclInvalidArgument);
  ASSERT_NE(message, nullptr);
  EXPECT_STREQ(message, "");
  const std::string id(128, '\0');
  const int zero = 0;
  infiniCclComm_t comms[2] = {nullptr, nullptr};
  EXPECT_EQ(plugin.comm_init_ranks(comms, 0, &zero, &zero, 1, id.data(), nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_EQ(plugin.comm_init_ranks(comms, 2, &zero, &zero, 1, id.data(), nullptr, nullptr),
            infiniCclInvalidArgument)
      << "more communicators than ranks";
  EXPECT_EQ(plugin.comm_init_ranks(comms, 1, nullptr, &zero, 1, id.data(), nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_EQ(plugin.comm_init_rank(comms, 1, nullptr, 0, nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_NE(std::string(plugin.get_last_error()).find("unique_id"), std::string::npos)
      << plugin.get_last_error();
}

TEST(NcclWithoutGpu, ReductionOfTypeNcclLacksIsUnsupportedAndNamesTheType) {
  const auto& plugin = PluginTable(*Nccl());
  const DLDataType int16{kDLInt, 16, 1};
  EXPECT_EQ(plugin.all_reduce(nullptr, nullptr, 1, int16, infiniCclSum, nullptr, nullptr),
            infiniCclUnsupported);
  EXPECT_NE(std::string(plugin.get_last_error()).find("int16"), std::string::npos)
      << plugin.get_last_error();
  // Moving int16 does not need arithmetic: it passes the type check and
  // stops at the missing communicator.
  EXPECT_EQ(plugin.broadcast(nullptr, nullptr, 1, int16, 0, nullptr, nullptr),
            infiniCclInvalidArgument);
  // bool reduces with max and min only (as uint8).
  const DLDataType boolean{INFINI_CCL_DL_BOOL, 8, 1};
  EXPECT_EQ(plugin.all_reduce(nullptr, nullptr, 1, boolean, infiniCclSum, nullptr, nullptr),
            infiniCclUnsupported);
  EXPECT_NE(std::string(plugin.get_last_error()).find("bool"), std::string::npos)
      << plugin.get_last_error();
  EXPECT_EQ(plugin.all_reduce(nullptr, nullptr, 1, boolean, infiniCclMax, nullptr, nullptr),
            infiniCclInvalidArgument)
      << "bool max passes the type check and stops at the missing communicator";
}

TEST(NcclWithoutGpu, UnknownReductionOperatorIsRefused) {
  const auto& plugin = PluginTable(*Nccl());
  EXPECT_EQ(plugin.all_reduce(nullptr, nullptr, 1, DLDataType{kDLFloat, 32, 1},
                              static_cast<infiniCclRedOp_t>(17), nullptr, nullptr),
            infiniCclInvalidArgument);
  EXPECT_NE(std::string(plugin.get_last_error()).find("17"), std::string::npos);
}

// The GPU tests judge with the shared host reference; they depend on these
// encodings.
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
    conformance::EncodeElement(entry.dtype, entry.value, element);
    const unsigned bits = entry.dtype.bits == 16 ? element[0] | (element[1] << 8) : element[0];
    EXPECT_EQ(bits, entry.bits) << entry.value;
    EXPECT_EQ(conformance::DecodeElement(entry.dtype, element), entry.value);
  }
}

TEST(HostReferenceEncoding, BoolIsOneByteZeroOrOne) {
  unsigned char element[1] = {0xA5};
  conformance::EncodeElement(DLDataType{INFINI_CCL_DL_BOOL, 8, 1}, 3.0, element);
  EXPECT_EQ(element[0], 1);
  conformance::EncodeElement(DLDataType{INFINI_CCL_DL_BOOL, 8, 1}, 0.0, element);
  EXPECT_EQ(element[0], 0);
}

TEST(HostReferenceEncoding, IntegersWrapLikeTheDevice) {
  unsigned char element[8] = {};
  conformance::EncodeElement(DLDataType{kDLInt, 8, 1}, 256.0, element);
  EXPECT_EQ(conformance::DecodeElement(DLDataType{kDLInt, 8, 1}, element), 0.0);
  conformance::EncodeElement(DLDataType{kDLUInt, 8, 1}, 200.0, element);
  EXPECT_EQ(conformance::DecodeElement(DLDataType{kDLUInt, 8, 1}, element), 200.0);
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
