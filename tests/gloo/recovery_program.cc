// One rank of a run under infini_run that loses its last rank, for
// recovery_run_test.cc:
//
//   infini_run --nproc_per_node=N --ccl_backend=gloo -- recovery_program DIR
//
// Rank 0's unique id travels through a file in DIR (written whole, then
// renamed). Every rank joins and all-reduces once; the last rank then ends
// its process without freeing anything (exit status 0, so the launcher does
// not stop the others: as if it were lost). The survivors have a receive
// from it pending on another thread; they revoke the communicator (the
// receive ends with an error), shrink it without the last rank with the
// abort flag, and all-reduce on the new one. Each survivor prints
// "rank R: lost N-1, now rank r of N-1, sum S" and exits 0; any failure
// is one line on stderr and exit 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>

#include "infini/ccl/ccl.h"

namespace {

namespace ccl = infini::ccl;

int EnvironmentNumber(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) throw std::runtime_error(std::string(name) + " is not set");
  return std::atoi(value);
}

ccl::UniqueId ShareId(const ccl::Backend& backend, const std::string& directory, int rank) {
  const std::filesystem::path path = std::filesystem::path(directory) / "id";
  if (rank == 0) {
    const ccl::UniqueId id = backend.GetUniqueId();
    const std::filesystem::path partial = path.string() + ".partial";
    std::ofstream(partial, std::ios::binary) << id.ToBytes();
    std::filesystem::rename(partial, path);
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("no unique id in " + path.string() + " after 30 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream file(path, std::ios::binary);
  return ccl::UniqueId::FromBytes(
      std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()));
}

// The sum over the communicator of `value`.
float Sum(const ccl::Communicator& comm, float value) {
  ccl::DeviceBuffer buffer(comm.backend(), sizeof(float));
  buffer.CopyFromHost(&value, sizeof(value));
  comm.AllReduce(buffer.AsTensor(ccl::dtype::kFloat32, 1), buffer.AsTensor(ccl::dtype::kFloat32, 1),
                 ccl::ReduceOp::kSum);
  float sum = 0;
  buffer.CopyToHost(&sum, sizeof(sum));
  return sum;
}

int Run(const std::string& directory) {
  const int rank = EnvironmentNumber("RANK");
  const int world_size = EnvironmentNumber("WORLD_SIZE");
  const auto backend = ccl::Backend::Load("gloo");
  ccl::CommConfig config;
  config.timeout_ms = 30000;
  ccl::Communicator comm =
      backend->CommInitRank(world_size, ShareId(*backend, directory, rank), rank, config);
  Sum(comm, 1.0f);  // everyone connected and working
  const int last = world_size - 1;
  if (rank == last) {
    std::fflush(stdout);
    _exit(0);  // lost: nothing freed, its sockets closed by the kernel
  }
  ccl::DeviceBuffer buffer(backend, sizeof(float));
  std::string pending_result = "returned";
  std::thread pending([&] {
    try {
      comm.Recv(buffer.AsTensor(ccl::dtype::kFloat32, 1), last);
    } catch (const ccl::Error& error) {
      pending_result = ccl::ResultName(error.code());
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  comm.Revoke();
  pending.join();
  if (pending_result == "returned") throw std::runtime_error("the pending recv returned success");
  const int excluded[] = {last};
  ccl::Communicator survivors = comm.Shrink(excluded, ccl::ShrinkMode::kAbort, config);
  const float sum = Sum(survivors, static_cast<float>(rank));
  std::printf("rank %d: lost %d, now rank %d of %d, sum %g, pending recv %s\n", rank, last,
              survivors.rank(), survivors.world_size(), sum, pending_result.c_str());
  survivors.Destroy();
  comm.Destroy();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: recovery_program DIR (under infini_run)\n");
    return 2;
  }
  try {
    return Run(argv[1]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "recovery_program: %s\n", error.what());
    return 1;
  }
}
