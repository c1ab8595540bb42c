// bin/first_allreduce: joins the job, does one all_reduce and exits, so that
// `time infini_run --ccl_backend=nccl --nproc_per_node=2 first_allreduce`
// measures launch to first all-reduce. Vendor-neutral: only the C++ API.
//
// Reads RANK, WORLD_SIZE, LOCAL_RANK and the launcher's store
// (INFINI_STORE_ADDR/PORT, INFINI_RUN_ID) to share the unique id.
// --launched_at_ns=$(date +%s%N), taken just before infini_run, makes rank 0
// also report the time from the launch; --phases prints where it went.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>

#include "infini/ccl/ccl.h"
#include "infini/common/launch_env.h"
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

// How long ago this process was started (from /proc/self/stat), so that
// what the dynamic loader did before main counts too.
uint64_t ProcessAgeNs() {
  std::FILE* stat = std::fopen("/proc/self/stat", "r");
  if (stat == nullptr) return 0;
  char buffer[1024] = {};
  const size_t length = std::fread(buffer, 1, sizeof(buffer) - 1, stat);
  std::fclose(stat);
  const char* after_name = std::strrchr(buffer, ')');
  if (length == 0 || after_name == nullptr) return 0;
  // Field 22 (starttime, clock ticks since boot); the name, field 2, ends at ')'.
  unsigned long long start_ticks = 0;
  int field = 2;
  for (const char* c = after_name + 1; *c != '\0'; ++c) {
    if (*c == ' ' && ++field == 22) {
      start_ticks = std::strtoull(c + 1, nullptr, 10);
      break;
    }
  }
  timespec boot_time{};
  clock_gettime(CLOCK_BOOTTIME, &boot_time);
  const double uptime_s = boot_time.tv_sec + boot_time.tv_nsec / 1e9;
  const double started_s = static_cast<double>(start_ticks) / sysconf(_SC_CLK_TCK);
  return uptime_s > started_s ? static_cast<uint64_t>((uptime_s - started_s) * 1e9) : 0;
}

// Wall-clock nanoseconds (comparable with `date +%s%N` in the shell).
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "name=ms since the process began" for each step, for --phases.
class Phases {
 public:
  explicit Phases(int64_t started_ns) : started_ns_(started_ns) {}
  void Mark(const char* name) {
    text_ += std::string(text_.empty() ? "" : " ") + name + "=" +
             std::to_string((NowNs() - started_ns_) / 1000000) + "ms";
  }
  const std::string& text() const { return text_; }

 private:
  int64_t started_ns_;
  std::string text_;
};

int64_t FlagValue(int argc, char** argv, const std::string& name) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument.rfind(prefix, 0) != 0) continue;
    try {
      return std::stoll(argument.substr(prefix.size()));
    } catch (const std::exception&) {
      throw std::runtime_error("--" + name + "='" + argument.substr(prefix.size()) +
                               "': expected nanoseconds since the epoch");
    }
  }
  return 0;
}

bool HasFlag(int argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i) {
    if (flag == argv[i]) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const auto started = std::chrono::steady_clock::now();
  Phases phases(NowNs() - static_cast<int64_t>(ProcessAgeNs()));
  try {
    const int64_t launched_at_ns = FlagValue(argc, argv, "launched_at_ns");
    const bool print_phases = HasFlag(argc, argv, "--phases");
    const int rank = EnvInt(infini::env::torchrun::kRank);
    const int world_size = EnvInt(infini::env::torchrun::kWorldSize);
    const int local_rank = EnvInt(infini::env::torchrun::kLocalRank);
    const std::string key = Env(infini::env::kRunId) + "/first_allreduce/unique_id";

    phases.Mark("main");
    auto backend = infini::ccl::Backend::Load();  // INFINI_CCL_BACKEND, or auto
    phases.Mark("loaded");
    // Under --isolate_devices the process sees only its own device.
    const char* isolated = std::getenv(infini::env::kDevicesIsolated);
    const int device = isolated != nullptr && std::strcmp(isolated, "1") == 0 ? 0 : local_rank;
    if (backend->info().device_type != kDLCPU) backend->SetDevice(device);
    phases.Mark("device");
    auto store = infini::rendezvous::TcpStoreClient::Connect(
        Env(infini::env::kStoreAddr), static_cast<uint16_t>(EnvInt(infini::env::kStorePort)),
        infini::rendezvous::Store::kDefaultTimeout, infini::rendezvous::RunTokenFromEnvironment());
    infini::ccl::UniqueId id;
    if (rank == 0) {
      id = backend->GetUniqueId();
      store->Set(key, id.ToBytes());
    } else {
      id = infini::ccl::UniqueId::FromBytes(store->Get(key));
    }
    phases.Mark("id");
    infini::ccl::Communicator comm = backend->CommInitRank(world_size, id, rank);
    phases.Mark("comm");

    infini::ccl::DeviceBuffer buffer(backend, sizeof(float));
    const float one = 1.0f;
    buffer.CopyFromHost(&one, sizeof(one));
    const infini::ccl::Stream stream = infini::ccl::Stream::Default(backend);
    const auto tensor = buffer.AsTensor(infini::ccl::dtype::kFloat32, 1);
    comm.AllReduce(tensor, tensor, infini::ccl::ReduceOp::kSum, stream);
    stream.Synchronize();
    float sum = 0;
    buffer.CopyToHost(&sum, sizeof(sum));
    phases.Mark("all_reduce");
    const int64_t done_ns = NowNs();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (sum != static_cast<float>(world_size)) {
      std::fprintf(stderr, "rank %d: all_reduce gave %g, expected %d\n", rank, sum, world_size);
      return 1;
    }
    if (rank == 0) {
      std::printf("first all_reduce done: %d ranks, backend %s, %.3f s after this process began",
                  world_size, backend->info().name.c_str(), seconds);
      if (launched_at_ns > 0) {
        std::printf(", %.3f s after the launch",
                    static_cast<double>(done_ns - launched_at_ns) / 1e9);
      }
      std::printf("\n");
    }
    if (print_phases) std::printf("rank %d phases: %s\n", rank, phases.text().c_str());
    comm.Destroy();
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "first_allreduce: %s\n", error.what());
    return 1;
  }
}
