// ccl_info: load a backend and say what it is. The first thing a vendor runs
// when porting a plugin, and how infini_run learns a backend's device count
// and visibility variable.
#include <gflags/gflags.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/ccl/device_backends.h"
#include "infini/common/flags.h"
#include "infini/common/launch_env.h"

DEFINE_string(ccl_backend, "",
              "Backend to load: a name (gloo, nccl, auto), a path to a plugin library, "
              "TRANSPORT+DEVICE (gloo+nccl, staged), or one backend per device type "
              "(cpu:gloo,cuda:nccl: each is loaded and listed, the accelerator's described). "
              "Default: $INFINI_CCL_BACKEND, else auto");
DEFINE_string(device_backend, "",
              "Stage the backend's collectives through this device backend's buffers and "
              "streams (a name such as nccl, or a path). Default: $INFINI_CCL_DEVICE_BACKEND. "
              "Example: --ccl_backend=gloo --device_backend=nccl");
DEFINE_bool(device_count, false, "Print only the number of visible devices");
DEFINE_bool(accelerator_count, false,
            "Print only the number of visible accelerator devices: 0 for a host backend "
            "(gloo), whatever its device count (what --nproc_per_node=gpu counts)");
DEFINE_bool(visibility_variable, false,
            "Print only the environment variable that restricts the visible devices "
            "(CUDA_VISIBLE_DEVICES, ...), or an empty line when the backend has none");
DEFINE_bool(capabilities, false,
            "Also print, per collective, the types and reductions the backend supports");

namespace {

using infini::ccl::Backend;
using infini::ccl::Capabilities;
using infini::ccl::Collective;

const char* YesNo(bool value) { return value ? "yes" : "no"; }

void PrintFeatures(const Capabilities& capabilities) {
  std::printf("features:     split=%s abort=%s group=%s capture=%s nonblocking=%s\n",
              YesNo(capabilities.split()), YesNo(capabilities.abort()), YesNo(capabilities.group()),
              YesNo(capabilities.capture()), YesNo(capabilities.nonblocking()));
  std::printf(
      "              init_rank=%s multi_device_init=%s concurrent_init=%s "
      "abort_unblocks=%s device_sharing=%s\n",
      YesNo(capabilities.init_rank()), YesNo(capabilities.multi_device_init()),
      YesNo(capabilities.concurrent_init()), YesNo(capabilities.abort_unblocks()),
      YesNo(capabilities.device_sharing()));
  std::printf("              shrink=%s revoke=%s\n", YesNo(capabilities.shrink()),
              YesNo(capabilities.revoke()));
  std::printf("              register=%s register_windows=%s link_bandwidth=%s\n",
              YesNo(capabilities.register_buffers()), YesNo(capabilities.register_windows()),
              YesNo(capabilities.link_bandwidth()));
  std::printf("              one_rank_per_process=%s\n",
              YesNo(capabilities.one_rank_per_process()));
}

// Whether supports() declares any type (and, for a reduction, operator) for
// `collective`.
bool DeclaresAnyType(const Capabilities& capabilities, Collective collective) {
  if (collective == Collective::kBarrier) return true;
  for (int t = 0; t < infini::ccl::kNumKnownDataTypes; ++t) {
    const DLDataType dtype = infini::ccl::KnownDataType(t);
    if (!infini::ccl::IsReduction(collective)) {
      if (capabilities.Supports(collective, dtype)) return true;
      continue;
    }
    for (int op = 0; op < infini::ccl::kNumReduceOps; ++op) {
      if (capabilities.Supports(collective, dtype, static_cast<infini::ccl::ReduceOp>(op))) {
        return true;
      }
    }
  }
  return false;
}

// What a port in progress still lacks: the entries that failed when asked
// (in the plugin's own words), and the collectives whose entry is set but
// for which supports() declares nothing. Empty when the plugin is complete.
std::vector<std::string> LeftToImplement(const Capabilities& capabilities,
                                         const std::vector<std::string>& failed) {
  std::vector<std::string> left = failed;
  std::string undeclared;
  for (int c = 0; c < infini::ccl::kNumCollectives; ++c) {
    const auto collective = static_cast<Collective>(c);
    if (capabilities.Implements(collective) && !DeclaresAnyType(capabilities, collective)) {
      undeclared +=
          (undeclared.empty() ? "" : ", ") + std::string(infini::ccl::CollectiveName(collective));
    }
  }
  if (!undeclared.empty()) {
    left.push_back("supports() declares no type for " + undeclared + " (docs/porting.md step 4)");
  }
  return left;
}

// One line per collective: "all_reduce: float32(sum,prod,max,min,avg) ...".
void PrintSupport(const Capabilities& capabilities) {
  for (int c = 0; c < infini::ccl::kNumCollectives; ++c) {
    const auto collective = static_cast<Collective>(c);
    std::string line = "  " + std::string(infini::ccl::CollectiveName(collective)) + ":";
    if (!capabilities.Implements(collective)) {
      std::printf("%s not implemented\n", line.c_str());
      continue;
    }
    if (collective == Collective::kBarrier) {
      std::printf("%s yes\n", line.c_str());
      continue;
    }
    for (int t = 0; t < infini::ccl::kNumKnownDataTypes; ++t) {
      const DLDataType dtype = infini::ccl::KnownDataType(t);
      if (!infini::ccl::IsReduction(collective)) {
        if (capabilities.Supports(collective, dtype)) {
          line += " " + infini::ccl::DataTypeName(dtype);
        }
        continue;
      }
      std::string ops;
      for (int op = 0; op < infini::ccl::kNumReduceOps; ++op) {
        const auto reduce_op = static_cast<infini::ccl::ReduceOp>(op);
        if (capabilities.Supports(collective, dtype, reduce_op)) {
          ops += (ops.empty() ? "" : ",") + std::string(infini::ccl::ReduceOpName(reduce_op));
        }
      }
      if (!ops.empty()) line += " " + infini::ccl::DataTypeName(dtype) + "(" + ops + ")";
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  infini::flags::Parse(&argc, &argv, "ccl_info [--ccl_backend=NAME|PATH] [--capabilities]",
                       "Loads an InfiniCCL backend plugin and prints what it is.\n"
                       "  ccl_info --ccl_backend=gloo --capabilities\n"
                       "  ccl_info --ccl_backend=/path/to/libinfini_ccl_myvendor.so");
  try {
    if (!FLAGS_device_backend.empty()) {
      setenv(infini::env::kDeviceBackend, FLAGS_device_backend.c_str(), 1);
    }
    const auto backend = Backend::Load(FLAGS_ccl_backend);
    const auto& info = backend->info();
    if (FLAGS_visibility_variable) {
      std::printf("%s\n", info.visible_devices_env.c_str());
      return 0;
    }
    if (FLAGS_device_count || FLAGS_accelerator_count) {
      const int device_count = backend->DeviceCount();
      std::printf("%d\n", FLAGS_accelerator_count && info.device_type == kDLCPU ? 0 : device_count);
      return 0;
    }
    // A port in progress: each entry that fails is reported and the rest
    // still shown, so one run says everything that is left.
    std::vector<std::string> failed;
    int device_count = 0;
    try {
      device_count = backend->DeviceCount();
    } catch (const infini::ccl::Error& error) {
      failed.push_back(error.what());
    }
    try {
      backend->GetDevice();
    } catch (const infini::ccl::Error& error) {
      failed.push_back(error.what());
    }
    std::printf("backend:      %s\n", info.name.c_str());
    std::printf("library:      %s\n", info.library_path.c_str());
    std::printf("abi version:  %u%s (this InfiniCCL supports %s)\n", info.abi_version,
                info.abi_version < INFINI_CCL_PLUGIN_ABI_VERSION ? ", adapted" : "",
                infini::ccl::SupportedAbiVersions().c_str());
    std::printf("version:      %s\n", info.version.c_str());
    std::printf("device:       %s %s, dlpack type %s, visibility variable %s\n",
                info.device_vendor.c_str(), info.device_kind.c_str(),
                infini::ccl::DeviceName(DLDevice{info.device_type, 0}).c_str(),
                info.visible_devices_env.empty() ? "(none)" : info.visible_devices_env.c_str());
    if (failed.empty()) {
      std::printf("devices:      %d\n", device_count);
    } else {
      std::printf("devices:      unknown (get_device_count failed)\n");
    }
    std::printf("unique id:    %zu bytes\n", info.unique_id_bytes);
    const char* from_environment = std::getenv(infini::env::kBackend);
    const std::string spec = !FLAGS_ccl_backend.empty()    ? FLAGS_ccl_backend
                             : from_environment != nullptr ? from_environment
                                                           : "";
    if (infini::ccl::IsDeviceBackendList(spec)) {
      // Tensors of each type go to their backend; the one above is the accelerator's.
      const auto by_type = infini::ccl::DeviceBackends::Load(spec);
      for (const auto& [type, entry] : by_type.entries()) {
        std::printf("tensors on %s: %s (%s)\n", infini::ccl::DeviceTypeName(type).c_str(),
                    entry->info().name.c_str(), entry->info().library_path.c_str());
      }
    }
    if (const char* device = std::getenv(infini::env::kDeviceBackend); device && *device) {
      std::printf(
          "staged:       collectives on host buffers, device memory and streams of %s "
          "(--device_backend); ranks may share a device\n",
          device);
    }
    PrintFeatures(backend->capabilities());
    if (device_count > 0) {
      if (const auto link = backend->GetLinkBandwidth(0)) {
        std::printf("link:         %s", link->kind.c_str());
        if (link->peak_GBps > 0) std::printf(" = %.0f GB/s per direction", link->peak_GBps);
        std::printf(" (device 0, get_link_bandwidth)\n");
      }
    }
    if (FLAGS_capabilities) {
      std::printf("collectives:\n");
      PrintSupport(backend->capabilities());
    }
    const std::vector<std::string> left = LeftToImplement(backend->capabilities(), failed);
    if (left.empty()) return 0;
    std::printf("left to implement:\n");
    for (const std::string& item : left) std::printf("  %s\n", item.c_str());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "ccl_info: %s\n", error.what());
    return 1;
  }
}
