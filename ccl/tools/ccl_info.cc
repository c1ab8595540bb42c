// ccl_info: load a backend and say what it is. The first thing a vendor runs
// when porting a plugin, and how infini_run learns a backend's device count.
#include <gflags/gflags.h>

#include <cstdio>
#include <exception>

#include "infini/ccl/ccl.h"

DEFINE_string(ccl_backend, "",
              "Backend to load: a name (gloo, nccl, auto) or a path to a plugin library. "
              "Default: $INFINI_CCL_BACKEND, else auto");
DEFINE_bool(device_count, false, "Print only the number of visible devices");

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Loads an InfiniCCL backend plugin and prints what it is.\n"
      "  ccl_info --ccl_backend=gloo\n"
      "  ccl_info --ccl_backend=/path/to/libinfini_ccl_myvendor.so");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  try {
    const auto backend = infini::ccl::Backend::Load(FLAGS_ccl_backend);
    const int device_count = backend->DeviceCount();
    if (FLAGS_device_count) {
      std::printf("%d\n", device_count);
      return 0;
    }
    const auto& info = backend->info();
    std::printf("backend:      %s\n", info.name.c_str());
    std::printf("library:      %s\n", info.library_path.c_str());
    std::printf("abi version:  %u (this InfiniCCL supports %d)\n", info.abi_version,
                INFINI_CCL_PLUGIN_ABI_VERSION);
    std::printf("version:      %s\n", info.version.c_str());
    std::printf("device type:  %s\n",
                infini::ccl::DeviceName(DLDevice{info.device_type, 0}).c_str());
    std::printf("devices:      %d\n", device_count);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ccl_info: %s\n", error.what());
    return 1;
  }
}
