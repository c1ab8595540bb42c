// bin/first_allreduce: joins the job, does one all_reduce and exits, so that
// `time infini_run --ccl_backend=nccl --nproc_per_node=2 first_allreduce`
// measures launch to first all-reduce. Vendor-neutral: only the C++ API.
//
// Reads RANK, WORLD_SIZE, LOCAL_RANK and the launcher's store
// (INFINI_STORE_ADDR/PORT, INFINI_RUN_ID) to share the unique id.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "infini/ccl/ccl.h"
#include "infini/rendezvous/run_token.h"
#include "infini/rendezvous/tcp_store.h"

namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw std::runtime_error(std::string(name) + " is not set: run this program under infini_run");
  }
  return value;
}

int EnvInt(const char* name) {
  const std::string value = Env(name);
  try {
    return std::stoi(value);
  } catch (const std::exception&) {
    throw std::runtime_error(std::string(name) + "='" + value + "': expected an integer");
  }
}

}  // namespace

int main() {
  const auto started = std::chrono::steady_clock::now();
  try {
    const int rank = EnvInt("RANK");
    const int world_size = EnvInt("WORLD_SIZE");
    const int local_rank = EnvInt("LOCAL_RANK");
    const std::string key = Env("INFINI_RUN_ID") + "/first_allreduce/unique_id";

    auto backend = infini::ccl::Backend::Load();  // INFINI_CCL_BACKEND, or auto
    if (backend->info().device_type != kDLCPU) backend->SetDevice(local_rank);
    auto store = infini::rendezvous::TcpStoreClient::Connect(
        Env("INFINI_STORE_ADDR"), static_cast<uint16_t>(EnvInt("INFINI_STORE_PORT")),
        infini::rendezvous::Store::kDefaultTimeout, infini::rendezvous::RunTokenFromEnvironment());
    infini::ccl::UniqueId id;
    if (rank == 0) {
      id = backend->GetUniqueId();
      store->Set(key, id.ToBytes());
    } else {
      id = infini::ccl::UniqueId::FromBytes(store->Get(key));
    }
    infini::ccl::Communicator comm = backend->CommInitRank(world_size, id, rank);

    infini::ccl::DeviceBuffer buffer(backend, sizeof(float));
    const float one = 1.0f;
    buffer.CopyFromHost(&one, sizeof(one));
    const infini::ccl::Stream stream = infini::ccl::Stream::Default(backend);
    const auto tensor = buffer.AsTensor(infini::ccl::dtype::kFloat32, 1);
    comm.AllReduce(tensor, tensor, infini::ccl::ReduceOp::kSum, stream);
    stream.Synchronize();
    float sum = 0;
    buffer.CopyToHost(&sum, sizeof(sum));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (sum != static_cast<float>(world_size)) {
      std::fprintf(stderr, "rank %d: all_reduce gave %g, expected %d\n", rank, sum, world_size);
      return 1;
    }
    if (rank == 0) {
      std::printf("first all_reduce done: %d ranks, backend %s, %.3f s after this process began\n",
                  world_size, backend->info().name.c_str(), seconds);
    }
    comm.Destroy();
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "first_allreduce: %s\n", error.what());
    return 1;
  }
}
