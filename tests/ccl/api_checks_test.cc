// Wrong tensors are refused before anything reaches the backend, with a
// message that says what was wrong.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/ccl/plugin_table.h"

namespace {

using infini::ccl::Backend;
using infini::ccl::Communicator;
using infini::ccl::Error;
using infini::ccl::FlatTensor;
using infini::ccl::ReduceOp;
namespace dtype = infini::ccl::dtype;

const std::string kMockPath = std::string(INFINI_CCL_TEST_PLUGIN_DIR) + "/libinfini_ccl_mock.so";

class ApiChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = Backend::Load(kMockPath);
    comm_ = backend_->CommInitRank(1, backend_->GetUniqueId(), 0);
    // Same handle as the loader's (dlopen reference-counts one library).
    void* handle = dlopen(kMockPath.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    ASSERT_NE(handle, nullptr);
    calls_ = reinterpret_cast<int (*)()>(dlsym(handle, "mock_plugin_collective_calls"));
    ASSERT_NE(calls_, nullptr);
  }

  FlatTensor Cpu(std::vector<float>& data, DLDataType type = dtype::kFloat32) {
    return FlatTensor(data.data(), type, static_cast<int64_t>(data.size()), DLDevice{kDLCPU, 0});
  }

  // Runs `call`, expects Error(InvalidArgument) containing `expected`, and
  // that the plugin was not called.
  template <typename Call>
  void ExpectRefused(Call call, const std::string& expected,
                     infiniCclResult_t code = infiniCclInvalidArgument) {
    const int before = calls_();
    try {
      call();
      ADD_FAILURE() << "call was not refused; expected: " << expected;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), code);
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
    EXPECT_EQ(calls_(), before) << "a refused call reached the plugin";
  }

  template <typename Function>
  Function Hook(const char* name) {
    void* handle = dlopen(kMockPath.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    return reinterpret_cast<Function>(dlsym(handle, name));
  }

  std::shared_ptr<const Backend> backend_;
  Communicator comm_;
  int (*calls_)() = nullptr;
};

TEST_F(ApiChecks, ValidCallReachesThePlugin) {
  std::vector<float> send(4), recv(4);
  const int before = calls_();
  comm_.AllReduce(Cpu(send), Cpu(recv), ReduceOp::kSum);
  EXPECT_EQ(calls_(), before + 1);
}

TEST_F(ApiChecks, NonContiguousTensorIsRefused) {
  std::vector<float> data(8), recv(4);
  int64_t shape[2] = {2, 2};
  int64_t strides[2] = {4, 1};  // every other row: not dense
  DLTensor strided{};
  strided.data = data.data();
  strided.device = DLDevice{kDLCPU, 0};
  strided.ndim = 2;
  strided.dtype = dtype::kFloat32;
  strided.shape = shape;
  strided.strides = strides;
  ExpectRefused([&] { comm_.AllReduce(strided, Cpu(recv), ReduceOp::kSum); },
                "AllReduce: send tensor is not contiguous");
}

TEST_F(ApiChecks, MismatchedDtypesAreRefused) {
  std::vector<float> send(4), recv(4);
  ExpectRefused([&] { comm_.AllReduce(Cpu(send), Cpu(recv, dtype::kInt32), ReduceOp::kSum); },
                "send tensor is float32 but recv tensor is int32");
}

TEST_F(ApiChecks, WrongDeviceTypeIsRefused) {
  std::vector<float> send(4), recv(4);
  FlatTensor on_gpu(send.data(), dtype::kFloat32, 4, DLDevice{kDLCUDA, 1});
  ExpectRefused([&] { comm_.AllReduce(on_gpu, Cpu(recv), ReduceOp::kSum); },
                "send tensor is on cuda:1, this backend needs cpu:1 memory");
}

TEST_F(ApiChecks, AllReduceCountMismatchIsRefused) {
  std::vector<float> send(4), recv(3);
  ExpectRefused([&] { comm_.AllReduce(Cpu(send), Cpu(recv), ReduceOp::kSum); },
                "recv tensor has 3 elements, expected the same number as send (4)");
}

TEST_F(ApiChecks, AllGatherOutputMustBeWorldTimesInput) {
  std::vector<float> send(4), recv(5);
  ExpectRefused([&] { comm_.AllGather(Cpu(send), Cpu(recv)); },
                "AllGather: recv tensor has 5 elements, expected world_size (1) x send elements "
                "(4) = 4");
}

TEST_F(ApiChecks, ReduceScatterInputMustBeWorldTimesOutput) {
  std::vector<float> send(4), recv(3);
  ExpectRefused(
      [&] { comm_.ReduceScatter(Cpu(send), Cpu(recv), ReduceOp::kSum); },
      "ReduceScatter: send tensor has 4 elements, expected world_size (1) x recv elements (3) = 3");
}

TEST_F(ApiChecks, RootOutsideTheGroupIsRefused) {
  std::vector<float> send(4), recv(4);
  ExpectRefused([&] { comm_.Broadcast(Cpu(send), Cpu(recv), 3); },
                "Broadcast: root 3 is outside [0, 1)");
}

TEST_F(ApiChecks, PeerOutsideTheGroupIsRefused) {
  std::vector<float> send(4);
  ExpectRefused([&] { comm_.Send(Cpu(send), -1); }, "Send: peer -1 is outside [0, 1)");
}

TEST_F(ApiChecks, PluginFailureCarriesThePluginsText) {
  try {
    comm_.Barrier();
    ADD_FAILURE() << "mock barrier should fail";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclInvalidUsage);
    EXPECT_NE(std::string(error.what())
                  .find("mock barrier failed: infiniCclInvalidUsage: mock "
                        "barrier always fails"),
              std::string::npos)
        << error.what();
  }
}

TEST_F(ApiChecks, NonBlockingInitInProgressGivesACommunicator) {
  infini::ccl::CommConfig config;
  config.blocking = false;
  Communicator comm = backend_->CommInitRank(1, backend_->GetUniqueId(), 0, config);
  EXPECT_TRUE(comm.valid());
  EXPECT_EQ(comm.world_size(), 1);
}

TEST_F(ApiChecks, MissingOptionalEntryIsRefusedNamingBackendAndCall) {
  std::vector<float> send(4), recv(4);
  ExpectRefused([&] { comm_.AllToAll(Cpu(send), Cpu(recv)); },
                "backend 'mock' does not implement all_to_all (an optional entry of its plugin)",
                infiniCclUnsupported);
  const std::vector<size_t> counts{4}, displacements{0};
  ExpectRefused(
      [&] { comm_.AllToAllV(Cpu(send), counts, displacements, Cpu(recv), counts, displacements); },
      "backend 'mock' does not implement all_to_all_v", infiniCclUnsupported);
}

TEST_F(ApiChecks, DeclaredUnsupportedReductionIsRefusedBeforeThePlugin) {
  std::vector<float> send(4), recv(4);
  ExpectRefused([&] { comm_.AllReduce(Cpu(send), Cpu(recv), ReduceOp::kAvg); },
                "backend 'mock' does not support all_reduce on float32 with avg",
                infiniCclUnsupported);
  ExpectRefused(
      [&] {
        comm_.ReduceScatter(Cpu(send, dtype::kBFloat16), Cpu(recv, dtype::kBFloat16),
                            ReduceOp::kSum);
      },
      "does not support reduce_scatter on bfloat16 with sum", infiniCclUnsupported);
  // Moving bytes of the same type is declared.
  const int before = calls_();
  comm_.Broadcast(Cpu(send, dtype::kBFloat16), Cpu(recv, dtype::kBFloat16), 0);
  EXPECT_EQ(calls_(), before + 1);
}

TEST_F(ApiChecks, CapabilitiesFollowTheDeclaration) {
  const auto& capabilities = backend_->capabilities();
  using infini::ccl::Collective;
  EXPECT_TRUE(capabilities.Supports(Collective::kAllReduce, dtype::kFloat32, ReduceOp::kMax));
  EXPECT_FALSE(capabilities.Supports(Collective::kAllReduce, dtype::kFloat32, ReduceOp::kAvg));
  EXPECT_FALSE(capabilities.Supports(Collective::kAllReduce, dtype::kFloat64, ReduceOp::kSum));
  EXPECT_TRUE(capabilities.Supports(Collective::kAllGather, dtype::kFloat64));
  EXPECT_FALSE(capabilities.Implements(Collective::kGather));
  EXPECT_TRUE(capabilities.nonblocking());
  EXPECT_FALSE(capabilities.concurrent_init());
  EXPECT_FALSE(capabilities.multi_device_init());
}

TEST_F(ApiChecks, UniqueIdOfTheWrongSizeIsRefused) {
  const auto id = infini::ccl::UniqueId::FromBytes(std::string(128, '\7'));
  try {
    backend_->CommInitRank(1, id, 0);
    ADD_FAILURE() << "a 128-byte id was accepted by a 4108-byte backend";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclInvalidArgument);
    EXPECT_NE(std::string(error.what())
                  .find("the unique id has 128 bytes, backend 'mock' expects "
                        "4108"),
              std::string::npos)
        << error.what();
  }
}

TEST_F(ApiChecks, UnsetConfigFieldsReachThePluginAsUndefinedNotZero) {
  const auto last_blocking = Hook<int (*)()>("mock_plugin_last_blocking");
  ASSERT_NE(last_blocking, nullptr);
  backend_->CommInitRank(1, backend_->GetUniqueId(), 0);
  EXPECT_EQ(last_blocking(), INFINI_CCL_CONFIG_UNDEF_INT);
  infini::ccl::CommConfig config;
  config.blocking = false;
  backend_->CommInitRank(1, backend_->GetUniqueId(), 0, config);
  EXPECT_EQ(last_blocking(), 0);
}

TEST_F(ApiChecks, VendorOptionsReachTheirBackendOnly) {
  const auto last_options = Hook<const char* (*)()>("mock_plugin_last_vendor_options");
  ASSERT_NE(last_options, nullptr);
  infini::ccl::CommConfig config;
  config.vendor_options = {{"nccl", "max_ctas", "16"},
                           {"mock", "buffer_mb", "200"},
                           {"hccl", "deterministic", "1"},
                           {"mock", "mode", "fast"}};
  backend_->CommInitRank(1, backend_->GetUniqueId(), 0, config);
  EXPECT_STREQ(last_options(), "buffer_mb=200;mode=fast;");
}

TEST_F(ApiChecks, AllRanksInOneCallWithoutMultiDeviceInit) {
  // The mock has neither comm_init_ranks nor concurrent init: one rank is
  // still possible, as comm_init_rank on that device.
  const int devices[] = {0};
  auto communicators = backend_->CommInitAll(devices);
  ASSERT_EQ(communicators.size(), 1u);
  EXPECT_EQ(communicators[0].world_size(), 1);
}

TEST_F(ApiChecks, CaptureOnABackendWithoutGraphsSaysSo) {
  infini::ccl::Stream stream(backend_);
  try {
    stream.BeginCapture();
    ADD_FAILURE() << "mock cannot capture";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclUnsupported);
    EXPECT_NE(std::string(error.what()).find("cannot capture"), std::string::npos);
  }
}

TEST_F(ApiChecks, CollectiveOnDestroyedCommunicatorIsRefused) {
  std::vector<float> send(4), recv(4);
  comm_.Destroy();
  try {
    comm_.AllReduce(Cpu(send), Cpu(recv), ReduceOp::kSum);
    ADD_FAILURE() << "destroyed communicator accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclInvalidUsage);
    EXPECT_NE(std::string(error.what()).find("communicator is not valid"), std::string::npos);
  }
}

TEST_F(ApiChecks, NullBuffersAreRefusedWhereNcclReadsOrWritesThem) {
  // The mock's one rank is every root: nothing here may be NULL.
  std::vector<float> data(4);
  const FlatTensor none(nullptr, dtype::kFloat32, 4, DLDevice{kDLCPU, 0});
  ExpectRefused([&] { comm_.Broadcast(none, Cpu(data), 0); },
                "Broadcast: send tensor has no data pointer");
  ExpectRefused([&] { comm_.Broadcast(Cpu(data), none, 0); },
                "Broadcast: recv tensor has no data pointer");
  ExpectRefused([&] { comm_.Reduce(Cpu(data), none, ReduceOp::kSum, 0); },
                "Reduce: recv tensor has no data pointer");
  ExpectRefused([&] { comm_.AllReduce(nullptr, data.data(), 4, dtype::kFloat32, ReduceOp::kSum); },
                "AllReduce: send tensor has no data pointer");
  ExpectRefused([&] { comm_.Recv(nullptr, 4, dtype::kFloat32, 0); },
                "Recv: recv tensor has no data pointer");
  // A count of 0 needs no buffer, as in NCCL.
  const int before = calls_();
  comm_.AllReduce(nullptr, nullptr, 0, dtype::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(calls_(), before + 1);
}

TEST_F(ApiChecks, RawPointerCallsAreCheckedLikeTensorCalls) {
  std::vector<float> data(4);
  EXPECT_EQ(comm_.device().device_type, kDLCPU);
  EXPECT_EQ(comm_.device().device_id, 0);
  ExpectRefused([&] { comm_.Broadcast(data.data(), data.data(), 4, dtype::kFloat32, 2); },
                "Broadcast: root 2 is outside [0, 1)");
  ExpectRefused([&] { comm_.AllGather(data.data(), data.data(), SIZE_MAX, dtype::kFloat32); },
                "AllGather: count");
  ExpectRefused(
      [&] { comm_.AllReduce(data.data(), data.data(), 4, dtype::kFloat32, ReduceOp::kAvg); },
      "does not support all_reduce on float32 with avg", infiniCclUnsupported);
  ExpectRefused([&] { comm_.AllToAll(data.data(), data.data(), 4, dtype::kFloat32); },
                "does not implement all_to_all", infiniCclUnsupported);
  const int before = calls_();
  comm_.AllReduce(data.data(), data.data(), 4, dtype::kFloat32, ReduceOp::kSum);
  comm_.Reduce(data.data(), data.data(), 4, dtype::kInt32, ReduceOp::kMax, 0);
  comm_.AllGather(data.data(), data.data(), 4, dtype::kFloat32);
  comm_.ReduceScatter(data.data(), data.data(), 4, dtype::kFloat32, ReduceOp::kSum);
  comm_.Send(data.data(), 4, dtype::kUInt16, 0);
  comm_.Recv(data.data(), 4, dtype::kInt16, 0);
  EXPECT_EQ(calls_(), before + 6);
}

TEST_F(ApiChecks, ReleaseGivesUpTheHandleWithoutDestroyingIt) {
  const auto destroy_calls = Hook<int (*)()>("mock_plugin_destroy_calls");
  ASSERT_NE(destroy_calls, nullptr);
  const int before = destroy_calls();
  Communicator comm = backend_->CommInitRank(1, backend_->GetUniqueId(), 0);
  const infiniCclComm_t handle = comm.Release();
  EXPECT_NE(handle, nullptr);
  EXPECT_FALSE(comm.valid());
  comm.Destroy();  // nothing left to destroy
  { Communicator gone = std::move(comm); }
  EXPECT_EQ(destroy_calls(), before);
  infini::ccl::PluginTable(*backend_).comm_destroy(handle);  // what the process's end would reclaim
}

TEST_F(ApiChecks, DeviceBufferRoundTripsThroughTheBackend) {
  infini::ccl::DeviceBuffer buffer(backend_, 4 * sizeof(float));
  const float in[4] = {1, 2, 3, 4};
  float out[4] = {};
  buffer.CopyFromHost(in, sizeof(in));
  buffer.CopyToHost(out, sizeof(out));
  EXPECT_EQ(std::vector<float>(out, out + 4), std::vector<float>(in, in + 4));
  EXPECT_THROW(buffer.AsTensor(dtype::kFloat32, 5), Error);
  EXPECT_EQ(buffer.AsTensor(dtype::kFloat32, 2, 2).count(), 2);
}

// What a framework does with its own tensors' memory, through ccl.h alone:
// set, copy in, copy out, on the default stream.
TEST_F(ApiChecks, FrameworkMemoryIsSetAndCopiedThroughTheBackend) {
  infini::ccl::DeviceBuffer storage(backend_, 4 * sizeof(float));
  void* device = storage.data();
  const float in[4] = {1, 2, 3, 4};
  float out[4] = {9, 9, 9, 9};
  backend_->MemsetAsync(device, 0, sizeof(out));
  backend_->MemcpyAsync(out, device, sizeof(out), infiniCclMemcpyDeviceToHost);
  infini::ccl::Stream::Default(backend_).Synchronize();
  EXPECT_EQ(std::vector<float>(out, out + 4), std::vector<float>(4, 0.0f));
  backend_->MemcpyAsync(device, in, sizeof(in), infiniCclMemcpyHostToDevice);
  backend_->MemcpyAsync(out, device, sizeof(out), infiniCclMemcpyDeviceToHost);
  infini::ccl::Stream::Default(backend_).Synchronize();
  EXPECT_EQ(std::vector<float>(out, out + 4), std::vector<float>(in, in + 4));
}

}  // namespace
