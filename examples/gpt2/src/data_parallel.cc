// DataParallelGroup over infini::ccl directly: ranks from the launcher's
// environment, the unique id through the launcher's store (or, without one,
// a store that rank 0 hosts at MASTER_ADDR:MASTER_PORT as torch's env://).
#include "data_parallel.h"

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/rendezvous/tcp_store.h"

namespace infini::examples::gpt2 {
namespace {

using std::chrono::seconds;

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

int EnvInteger(const char* name, int fallback, int minimum) {
  const std::string text = EnvOr(name, "");
  if (text.empty()) return fallback;
  int value = 0;
  auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || stop != text.data() + text.size() || value < minimum) {
    throw std::runtime_error(std::string(name) + "='" + text +
                             "': expected an integer >= " + std::to_string(minimum));
  }
  return value;
}

class SingleRank : public DataParallelGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string description() const override { return "none"; }
  void AllReduceAverage(std::span<float>) override {}
  void BroadcastFromMain(std::span<std::byte>) override {}
};

class CclGroup : public DataParallelGroup {
 public:
  CclGroup(int rank, int world_size, int local_rank, const std::string& backend_spec)
      : rank_(rank), world_size_(world_size) {
    backend_ = ccl::Backend::Load(backend_spec);
    on_host_ = backend_->info().device_type == kDLCPU;
    if (!on_host_) {
      const int devices = backend_->DeviceCount();
      if (local_rank >= devices) {
        throw std::runtime_error("LOCAL_RANK=" + std::to_string(local_rank) + ": backend " +
                                 backend_->info().name + " sees " + std::to_string(devices) +
                                 " device(s); start at most that many ranks per node");
      }
      backend_->SetDevice(local_rank);
    }
    const ccl::UniqueId id = ShareUniqueId();
    ccl::CommConfig config;
    config.name = "gpt2.data_parallel";
    communicator_ = backend_->CommInitRank(world_size_, id, rank_, config);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string description() const override {
    return backend_->info().name + " (" +
           ccl::DeviceName(
               DLDevice{backend_->info().device_type, on_host_ ? 0 : backend_->GetDevice()}) +
           ")";
  }

  void AllReduceAverage(std::span<float> values) override {
    const int64_t count = static_cast<int64_t>(values.size());
    if (on_host_) {
      ccl::FlatTensor tensor(values.data(), ccl::dtype::kFloat32, count, DLDevice{kDLCPU, 0});
      backend_->AllReduce(tensor, tensor, ccl::ReduceOp::kAvg, communicator_);
      Synchronize();
      return;
    }
    // The backend's memory lives on its device: stage through a device buffer.
    const DeviceStaging staging = Stage(values.size_bytes());
    staging.buffer->CopyFromHost(values.data(), values.size_bytes());
    const ccl::FlatTensor tensor = staging.buffer->AsTensor(ccl::dtype::kFloat32, count);
    backend_->AllReduce(tensor, tensor, ccl::ReduceOp::kAvg, communicator_);
    Synchronize();
    staging.buffer->CopyToHost(values.data(), values.size_bytes());
  }

  void BroadcastFromMain(std::span<std::byte> bytes) override {
    const int64_t count = static_cast<int64_t>(bytes.size());
    if (count == 0) return;
    if (on_host_) {
      ccl::FlatTensor tensor(bytes.data(), ccl::dtype::kUInt8, count, DLDevice{kDLCPU, 0});
      backend_->Broadcast(tensor, tensor, 0, communicator_);
      Synchronize();
      return;
    }
    const DeviceStaging staging = Stage(bytes.size());
    if (rank_ == 0) staging.buffer->CopyFromHost(bytes.data(), bytes.size());
    const ccl::FlatTensor tensor = staging.buffer->AsTensor(ccl::dtype::kUInt8, count);
    backend_->Broadcast(tensor, tensor, 0, communicator_);
    Synchronize();
    staging.buffer->CopyToHost(bytes.data(), bytes.size());
  }

 private:
  struct DeviceStaging {
    const ccl::DeviceBuffer* buffer;
  };

  DeviceStaging Stage(size_t bytes) {
    if (staging_.bytes() < bytes) staging_ = ccl::DeviceBuffer(backend_, bytes);
    return {&staging_};
  }

  void Synchronize() const { ccl::Stream::Default(backend_).Synchronize(); }

  // Rank 0 makes the id and publishes it; the others wait for it. Keys carry
  // the run id and restart count, so runs and restarts never mix.
  ccl::UniqueId ShareUniqueId() {
    const std::string run = EnvOr("INFINI_RUN_ID", EnvOr("TORCHELASTIC_RUN_ID", "local"));
    const std::string key =
        run + "/gpt2/data_parallel/" + EnvOr("TORCHELASTIC_RESTART_COUNT", "0") + "/unique_id";
    std::string host = EnvOr("INFINI_STORE_ADDR", "");
    int port = EnvInteger("INFINI_STORE_PORT", 0, 0);
    if (host.empty() || port == 0) {
      // No launcher store: rank 0 hosts one at MASTER_ADDR:MASTER_PORT.
      host = EnvOr("MASTER_ADDR", "127.0.0.1");
      port = EnvInteger("MASTER_PORT", 29500, 1);
      if (rank_ == 0) {
        rendezvous::TcpStoreServerOptions options;
        options.port = static_cast<uint16_t>(port);
        server_ = rendezvous::TcpStoreServer::Start(options);
      }
    }
    store_ = rendezvous::TcpStoreClient::Connect(host, static_cast<uint16_t>(port), seconds(120));
    store_->set_timeout(seconds(300));
    if (rank_ == 0) {
      const ccl::UniqueId id = backend_->GetUniqueId();
      store_->Set(key, id.ToBytes());
      return id;
    }
    return ccl::UniqueId::FromBytes(store_->Get(key));
  }

  int rank_;
  int world_size_;
  std::shared_ptr<const ccl::Backend> backend_;
  bool on_host_ = true;
  std::unique_ptr<rendezvous::TcpStoreServer> server_;
  std::unique_ptr<rendezvous::TcpStoreClient> store_;
  ccl::Communicator communicator_;
  ccl::DeviceBuffer staging_;
};

}  // namespace

std::unique_ptr<DataParallelGroup> DataParallelGroup::Create(const std::string& backend_spec) {
  const int world_size = EnvInteger("WORLD_SIZE", 1, 1);
  const int rank = EnvInteger("RANK", 0, 0);
  const int local_rank = EnvInteger("LOCAL_RANK", rank, 0);
  if (rank >= world_size) {
    throw std::runtime_error("RANK=" + std::to_string(rank) +
                             ": expected a rank below WORLD_SIZE=" + std::to_string(world_size));
  }
  if (world_size == 1) return std::make_unique<SingleRank>();
  return std::make_unique<CclGroup>(rank, world_size, local_rank, backend_spec);
}

}  // namespace infini::examples::gpt2
