// libFuzzer harness: infini_run's command line. The input is a list of
// arguments separated by NUL bytes. Whatever it is, parsing must end in
// LaunchOptions that hold together, or in a UsageError/LaunchError (one
// line for the user): never a crash, a hang or another exception.
#include <gflags/gflags.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "infini/launch/options.h"

namespace {

constexpr size_t kMaxArguments = 64;

std::vector<std::string> SplitArguments(const uint8_t* data, size_t size) {
  std::vector<std::string> arguments{"infini_run"};
  std::string current;
  for (size_t i = 0; i < size && arguments.size() < kMaxArguments; ++i) {
    if (data[i] == '\0') {
      arguments.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (!current.empty() && arguments.size() < kMaxArguments) arguments.push_back(current);
  return arguments;
}

// What a successful parse promises the launcher.
void CheckInvariants(const infini::launch::LaunchOptions& options) {
  if (options.nnodes < 1 || options.processes_per_node < 1) std::abort();
  if (options.node_rank >= options.nnodes) std::abort();
  if (static_cast<long long>(options.nnodes) * options.processes_per_node > INT_MAX) std::abort();
  if (options.run_id.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The parse must not find ccl_info or a backend from the environment.
  unsetenv("INFINI_CCL_BACKEND");
  unsetenv("INFINI_RUN_TOKEN");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> arguments = SplitArguments(data, size);
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  // Every flag goes back to its default after each input.
  gflags::FlagSaver saved_flags;
  infini::launch::LaunchOptions options;
  try {
    if (infini::launch::ParseLaunchCommandLine(static_cast<int>(arguments.size()), argv.data(),
                                               &options)) {
      CheckInvariants(options);
    }
  } catch (const infini::launch::UsageError&) {
  } catch (const infini::launch::LaunchError&) {
  }
  return 0;
}
