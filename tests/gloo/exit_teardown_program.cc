// Communicators kept in static objects until the process exits, for
// exit_teardown_test.cc:
//
//   exit_teardown_program SPEC RANKS [late|reset]
//
// loads backend SPEC after this file's statics exist, makes RANKS ranks
// with CommInitAll and keeps them in a static registry (a framework's
// singleton), then returns from main. "late" keeps them instead in a
// function-local static made after the load (destroyed before the exit hook
// runs, so through the plugin); "reset" destroys them before main returns.
// With a plugin that counts its comm_destroy calls (the mock's
// mock_plugin_destroy_calls), the static made first, hence destroyed last,
// prints how many happened after main returned.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/ccl.h"

namespace {

namespace ccl = infini::ccl;

int (*g_destroy_calls)() = nullptr;
int g_destroy_calls_in_main = -1;

// Constructed first, destroyed last: after the registry below.
struct ExitReport {
  ~ExitReport() {
    if (g_destroy_calls == nullptr) return;
    std::fprintf(stderr, "comm_destroy calls in main: %d, after main: %d\n",
                 g_destroy_calls_in_main, g_destroy_calls() - g_destroy_calls_in_main);
  }
} g_exit_report;

// The framework's singleton of communicators, constructed before the load.
struct Registry {
  std::vector<ccl::Communicator> communicators;
} g_registry;

Registry& LateRegistry() {
  static Registry registry;  // constructed at the first call, after the load
  return registry;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: exit_teardown_program SPEC RANKS [late|reset]\n");
    return 2;
  }
  const std::string spec = argv[1];
  const int ranks = std::atoi(argv[2]);
  const std::string mode = argc > 3 ? argv[3] : "";
  const auto backend = ccl::Backend::Load(spec);
  if (void* library = dlopen(backend->info().library_path.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    g_destroy_calls = reinterpret_cast<int (*)()>(dlsym(library, "mock_plugin_destroy_calls"));
  }
  std::vector<int> devices(static_cast<size_t>(ranks), 0);
  Registry& registry = mode == "late" ? LateRegistry() : g_registry;
  registry.communicators = backend->CommInitAll(devices);
  // Each rank runs an all_reduce on its own thread, so that the
  // communicators have connected before they are left at exit.
  std::vector<std::thread> threads;
  std::atomic<bool> failed{false};
  for (ccl::Communicator& comm : registry.communicators) {
    threads.emplace_back([&comm, &failed, ranks] {
      float value = 1;
      comm.AllReduce(&value, &value, 1, ccl::dtype::kFloat32, ccl::ReduceOp::kSum);
      if (value != static_cast<float>(ranks)) failed = true;
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (failed) {
    std::fprintf(stderr, "all_reduce gave a wrong sum\n");
    return 1;
  }
  if (mode == "reset") registry.communicators.clear();
  if (g_destroy_calls != nullptr) g_destroy_calls_in_main = g_destroy_calls();
  std::fprintf(stderr, "main returns with %zu communicators in a static\n",
               registry.communicators.size());
  return 0;
}
