// Wrong tensors are refused before anything reaches the backend, with a
// message that says what was wrong.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

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
  void ExpectRefused(Call call, const std::string& expected) {
    const int before = calls_();
    try {
      call();
      ADD_FAILURE() << "call was not refused; expected: " << expected;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), infiniCclInvalidArgument);
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
    EXPECT_EQ(calls_(), before) << "a refused call reached the plugin";
  }

  std::shared_ptr<const Backend> backend_;
  Communicator comm_;
  int (*calls_)() = nullptr;
};

TEST_F(ApiChecks, ValidCallReachesThePlugin) {
  std::vector<float> send(4), recv(4);
  const int before = calls_();
  backend_->AllReduce(Cpu(send), Cpu(recv), ReduceOp::kSum, comm_);
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
  ExpectRefused([&] { backend_->AllReduce(strided, Cpu(recv), ReduceOp::kSum, comm_); },
                "AllReduce: send tensor is not contiguous");
}

TEST_F(ApiChecks, MismatchedDtypesAreRefused) {
  std::vector<float> send(4), recv(4);
  ExpectRefused(
      [&] { backend_->AllReduce(Cpu(send), Cpu(recv, dtype::kInt32), ReduceOp::kSum, comm_); },
      "send tensor is float32 but recv tensor is int32");
}

TEST_F(ApiChecks, WrongDeviceTypeIsRefused) {
  std::vector<float> send(4), recv(4);
  FlatTensor on_gpu(send.data(), dtype::kFloat32, 4, DLDevice{kDLCUDA, 1});
  ExpectRefused([&] { backend_->AllReduce(on_gpu, Cpu(recv), ReduceOp::kSum, comm_); },
                "send tensor is on cuda:1, this backend needs cpu:1 memory");
}

TEST_F(ApiChecks, AllReduceCountMismatchIsRefused) {
  std::vector<float> send(4), recv(3);
  ExpectRefused([&] { backend_->AllReduce(Cpu(send), Cpu(recv), ReduceOp::kSum, comm_); },
                "recv tensor has 3 elements, expected the same number as send (4)");
}

TEST_F(ApiChecks, AllGatherOutputMustBeWorldTimesInput) {
  std::vector<float> send(4), recv(5);
  ExpectRefused([&] { backend_->AllGather(Cpu(send), Cpu(recv), comm_); },
                "AllGather: recv tensor has 5 elements, expected world_size (1) x send elements "
                "(4) = 4");
}

TEST_F(ApiChecks, ReduceScatterInputMustBeWorldTimesOutput) {
  std::vector<float> send(4), recv(3);
  ExpectRefused(
      [&] { backend_->ReduceScatter(Cpu(send), Cpu(recv), ReduceOp::kSum, comm_); },
      "ReduceScatter: send tensor has 4 elements, expected world_size (1) x recv elements (3) = 3");
}

TEST_F(ApiChecks, RootOutsideTheGroupIsRefused) {
  std::vector<float> send(4), recv(4);
  ExpectRefused([&] { backend_->Broadcast(Cpu(send), Cpu(recv), 3, comm_); },
                "Broadcast: root 3 is outside [0, 1)");
}

TEST_F(ApiChecks, PeerOutsideTheGroupIsRefused) {
  std::vector<float> send(4);
  ExpectRefused([&] { backend_->Send(Cpu(send), -1, comm_); }, "Send: peer -1 is outside [0, 1)");
}

TEST_F(ApiChecks, PluginFailureCarriesThePluginsText) {
  try {
    backend_->Barrier(comm_);
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

TEST_F(ApiChecks, UnsupportedOptionalCallSaysSo) {
  std::vector<float> send(4), recv(4);
  try {
    backend_->AllToAll(Cpu(send), Cpu(recv), comm_);
    ADD_FAILURE() << "mock has no all_to_all";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclUnsupported);
  }
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
    backend_->AllReduce(Cpu(send), Cpu(recv), ReduceOp::kSum, comm_);
    ADD_FAILURE() << "destroyed communicator accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), infiniCclInvalidUsage);
    EXPECT_NE(std::string(error.what()).find("communicator is not valid"), std::string::npos);
  }
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

}  // namespace
