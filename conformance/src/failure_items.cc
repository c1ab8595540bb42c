// failure/peer_killed: a peer process dies (SIGKILL) in the middle of a
// collective, and what the survivors see is judged by behaviour. The peer
// is an extra rank: global rank 0 starts a copy of this program in victim
// mode (RunVictim), every rank makes a communicator of world_size + 1 with
// it, one all_reduce proves the communicator works, then the survivors
// enter a second all_reduce and rank 0 kills the victim.
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "infini/parallel/env_reader.h"
#include "suite_items.h"

extern char** environ;

namespace infini::conformance::internal {
namespace {

using Clock = std::chrono::steady_clock;

// How long the survivors have to see the loss, and an abort to return.
constexpr std::chrono::seconds kDetectBound{5};
constexpr std::chrono::seconds kAbortBound{10};
constexpr int64_t kCount = 1 << 16;

int64_t Milliseconds(Clock::duration duration) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(duration).count();
}

// Starts this program as the victim of `key`; its pid, or -1. A staged
// backend's device comes from INFINI_CCL_DEVICE_BACKEND, which the victim
// inherits: it is given the transport's file.
pid_t StartVictim(const RankContext& context, const std::string& key) {
  const ccl::BackendInfo& info = context.backend->info();
  const std::vector<std::string> arguments = {
      "ccl_conformance", "--victim_of=" + key,
      "--victim_world=" + std::to_string(context.world_size + 1),
      "--ccl_backend=" +
          (info.transport_library_path.empty() ? info.library_path : info.transport_library_path)};
  std::vector<char*> argv;
  for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

}  // namespace

Outcome PeerKilled(RankContext& context) {
  const std::string key = context.item_key;
  const int nranks = context.world_size + 1;
  pid_t victim = -1;
  if (context.rank == 0) {
    victim = StartVictim(context, key);
    if (victim < 0) return Fail("could not start the process to kill");
  }
  // Reaped however the item ends.
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid <= 0) return;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{victim};

  auto bootstrap = MakeBootstrap(*context.run_store, key + "/bootstrap/");
  ccl::Communicator comm = context.NewCommunicatorOnePerThread(
      key, context.ShareUniqueId(key, bootstrap), {}, bootstrap, nranks);
  Watched watched(*context.watch, comm);
  if (std::string wrong = SumCheck(context, comm, {context.rank, nranks}, 1024); !wrong.empty()) {
    return Fail("all_reduce with the extra rank, before it was killed: " + wrong);
  }
  context.store->Add(key + "/entering", 1);

  std::atomic<bool> killed{false};
  std::thread killer;
  if (context.rank == 0) {
    killer = std::thread([&] {
      try {
        context.store->Wait({key + "/victim_ready"}, kDetectBound);
        while (context.store->Add(key + "/entering", 0) < context.world_size) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      } catch (const std::exception&) {
        // Killed anyway: the survivors' bound decides.
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // all in the collective
      killed = true;
      kill(victim, SIGKILL);
    });
  }
  struct Joiner {
    std::thread& thread;
    ~Joiner() {
      if (thread.joinable()) thread.join();
    }
  } joiner{killer};

  const DLDataType dtype = ccl::dtype::kFloat32;
  ccl::DeviceBuffer buffer =
      Upload(context, dtype, InputValues(dtype, ReduceOp::kSum, context.rank, nranks, 0, kCount));
  // The call runs on a thread of its own: a blocking library that never
  // notices the loss stays in it until the abort below.
  std::string call_error;
  std::atomic<bool> returned{false};
  bool returned_after_kill = false;
  std::thread caller([&] {
    try {
      context.ActivateDevice();
      comm.AllReduce(buffer.AsTensor(dtype, kCount), buffer.AsTensor(dtype, kCount), ReduceOp::kSum,
                     context.stream);
      returned_after_kill = killed.load();
    } catch (const ccl::Error& error) {
      call_error = std::string(ccl::ResultName(error.code())) + ": " + error.what();
    }
    returned = true;
  });
  struct CallerJoiner {
    std::thread& thread;
    ~CallerJoiner() {
      if (thread.joinable()) thread.join();
    }
  } caller_joiner{caller};
  // The loss must show as the call's error or in the async error (an
  // enqueueing backend) within the bound.
  const auto deadline = Clock::now() + kDetectBound;
  std::string message;
  infiniCclResult_t state = infiniCclSuccess;
  while (Clock::now() < deadline) {
    if (returned.load()) break;
    state = comm.GetAsyncError(&message);
    if (state != infiniCclSuccess) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The caller's results are read only once it has been joined.
  const bool done = returned.load();
  if (done) {
    caller.join();
    state = comm.GetAsyncError(&message);
  }
  Outcome outcome = Pass();
  if (done && returned_after_kill && call_error.empty()) {
    outcome = Fail("all_reduce returned success after a peer was killed in the middle of it");
  } else if (done && !call_error.empty() && state == infiniCclSuccess) {
    outcome =
        Fail("the all_reduce failed (" + call_error + ") but comm_get_async_error says no error");
  } else if (state == infiniCclSuccess) {
    outcome = Pass("no error within " + std::to_string(kDetectBound.count()) +
                   " s (a library that leaves detection to a timeout)");
  } else {
    outcome = Pass(std::string("comm_get_async_error: ") + ccl::ResultName(state));
  }
  // Abort (the item runs only where there is one) must end whatever is
  // still pending, within a bound.
  const auto start = Clock::now();
  comm.Abort();
  while (!returned.load() && Clock::now() - start < kAbortBound) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int64_t abort_ms = Milliseconds(Clock::now() - start);
  if (!returned.load() && outcome.verdict == Verdict::kPass) {
    outcome = Fail("the all_reduce a lost peer left pending was still blocked " +
                   std::to_string(abort_ms) + " ms after comm_abort");
  }
  outcome.rebuild_world = true;  // the world may share the dead peer's sockets' fate
  return outcome;
}

int RunVictim(const std::string& key, int nranks, const std::string& backend_name) {
  // Never outlive the rank that started it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const parallel::Environment environment = parallel::CurrentEnvironment();
  const parallel::ProcessTopology topology = parallel::ReadProcessTopology(environment);
  const parallel::RuntimeSettings settings = parallel::ReadRuntimeSettings(environment, topology);
  const std::shared_ptr<const ccl::Backend> backend = ccl::Backend::Load(backend_name);
  const RunStore run_store(settings, topology, "ccl_conformance");
  const std::shared_ptr<rendezvous::Store> store = run_store.Connect();
  const std::string shared = store->Get(key + "/id");
  if (shared.empty() || shared[0] != 'I') return 1;
  const ccl::UniqueId id = ccl::UniqueId::FromBytes(shared.substr(1));
  if (backend->info().device_type != kDLCPU) backend->SetDevice(backend->DeviceCount() - 1);
  auto bootstrap = MakeBootstrap(run_store, key + "/bootstrap/");
  const int rank = nranks - 1;
  const int ranks[] = {rank};
  const int devices[] = {0};
  ccl::Communicator comm =
      backend->capabilities().init_rank()
          ? backend->CommInitRank(nranks, id, rank, {}, bootstrap)
          : std::move(backend->CommInitRanks(nranks, id, ranks, devices, {}, bootstrap).front());
  ccl::Stream stream(backend);
  const DLDataType dtype = ccl::dtype::kFloat32;
  ccl::DeviceBuffer buffer(backend, 1024 * sizeof(float));
  const auto values = Encode(dtype, InputValues(dtype, ReduceOp::kSum, rank, nranks, 0, 1024));
  buffer.CopyFromHost(values.data(), values.size());
  comm.AllReduce(buffer.AsTensor(dtype, 1024), buffer.AsTensor(dtype, 1024), ReduceOp::kSum,
                 stream);
  stream.Synchronize();
  store->Set(key + "/victim_ready", "1");
  // Waits to be killed; never takes part in the second all_reduce.
  std::this_thread::sleep_for(std::chrono::seconds(120));
  return 0;
}

}  // namespace infini::conformance::internal
