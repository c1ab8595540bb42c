// The gloo backend's device runtime is the host.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "rank_runner.h"

namespace infini::gloo_test {
namespace {

TEST(GlooDeviceRuntime, HostIsTheOneDeviceAndAnyIndexSelectsIt) {
  const auto& backend = GlooBackend();
  EXPECT_EQ(backend->info().device_type, kDLCPU);
  EXPECT_EQ(backend->DeviceCount(), 1);
  backend->SetDevice(3);  // ranks of one machine share the host
  EXPECT_EQ(backend->GetDevice(), 3);
  backend->SetDevice(0);
  EXPECT_THROW(backend->SetDevice(-1), ccl::Error);
}

TEST(GlooDeviceRuntime, BuffersCopyAndEventsMeasureHostTime) {
  const auto& backend = GlooBackend();
  ccl::DeviceBuffer buffer(backend, 1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 64, 0u);
  std::vector<char> in(1000, 'x');
  std::vector<char> out(1000, 0);
  buffer.CopyFromHost(in.data(), in.size());
  buffer.CopyToHost(out.data(), out.size());
  EXPECT_EQ(in, out);

  ccl::Stream stream(backend);
  ccl::Event start(backend);
  ccl::Event end(backend);
  start.Record(stream);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end.Record(stream);
  stream.Synchronize();
  EXPECT_TRUE(end.Query());
  EXPECT_GE(end.ElapsedMsSince(start), 19.0f);
}

}  // namespace
}  // namespace infini::gloo_test
