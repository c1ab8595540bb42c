#include "link_bandwidth.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include "device_runtime.h"
#include "errors.h"

namespace infini::ccl::nccl {
namespace {

// The few NVML declarations used, as nvml.h has them (the header is not
// needed to build: NVML is reached only through dlsym).
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kNvmlFeatureEnabled = 1;
constexpr unsigned kMaxNvLinks = 18;  // NVML_NVLINK_MAX_LINKS (Hopper, Blackwell)

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*nvlink_state)(NvmlDevice, unsigned, unsigned*) = nullptr;
  NvmlReturn (*nvlink_version)(NvmlDevice, unsigned, unsigned*) = nullptr;
  NvmlReturn (*pcie_generation)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*pcie_width)(NvmlDevice, unsigned*) = nullptr;
};

// The library stays loaded once opened: unloading a driver library while
// another part of the process may hold it buys nothing.
const Nvml* OpenNvml(std::string* why) {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    *why = "libnvidia-ml.so.1 not found";
    return nullptr;
  }
  static Nvml nvml;
  const auto symbol = [&](auto* entry, const char* name) {
    *entry = reinterpret_cast<std::remove_pointer_t<decltype(entry)>>(dlsym(library, name));
    return *entry != nullptr;
  };
  if (!symbol(&nvml.init, "nvmlInit_v2") || !symbol(&nvml.shutdown, "nvmlShutdown") ||
      !symbol(&nvml.handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") ||
      !symbol(&nvml.nvlink_state, "nvmlDeviceGetNvLinkState") ||
      !symbol(&nvml.nvlink_version, "nvmlDeviceGetNvLinkVersion") ||
      !symbol(&nvml.pcie_generation, "nvmlDeviceGetMaxPcieLinkGeneration") ||
      !symbol(&nvml.pcie_width, "nvmlDeviceGetMaxPcieLinkWidth")) {
    *why = "libnvidia-ml.so.1 lacks an entry this plugin reads";
    return nullptr;
  }
  return &nvml;
}

// NVML's nvmlNvlinkVersion_t (1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1,
// 6 = 4.0, 7 = 5.0) as the NVLink generation. Hopper is NVLink 4 whatever
// NVML says: some drivers report 5.0 for H100/H200.
int NvLinkGeneration(unsigned nvml_version, int compute_major) {
  if (compute_major == 9) return 4;
  static constexpr int kGeneration[] = {0, 1, 2, 2, 3, 3, 4, 5};
  return nvml_version < sizeof(kGeneration) / sizeof(kGeneration[0]) ? kGeneration[nvml_version]
                                                                     : 0;
}

// GB/s per link and direction: NVLink 1 20; 2 to 4 25; 5 50.
double NvLinkRate(int generation) {
  if (generation == 1) return 20;
  if (generation >= 2 && generation <= 4) return 25;
  if (generation == 5) return 50;
  return 0;
}

// GB/s per lane and direction after line coding (PCIe gen 1..6).
double PcieLaneRate(unsigned generation) {
  static constexpr double kRate[] = {0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.563};
  return generation < sizeof(kRate) / sizeof(kRate[0]) ? kRate[generation] : 0;
}

void SetKind(infiniCclLinkBandwidth_t* link, const std::string& kind) {
  std::snprintf(link->kind, sizeof(link->kind), "%s", kind.c_str());
}

}  // namespace

infiniCclResult_t GetLinkBandwidth(int device, infiniCclLinkBandwidth_t* link) {
  if (link == nullptr || link->struct_size < sizeof(infiniCclLinkBandwidth_t)) {
    return Fail(infiniCclInvalidArgument,
                "get_link_bandwidth: expected a link description of this plugin's size");
  }
  link->peak_GBps = 0;
  CCLCHECK(RequireDevice("get_link_bandwidth"));
  char bus_id[32] = {};
  int compute_major = 0;
  CCLCHECK(CheckCuda(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device),
                     "get_link_bandwidth: cudaDeviceGetPCIBusId"));
  CCLCHECK(
      CheckCuda(cudaDeviceGetAttribute(&compute_major, cudaDevAttrComputeCapabilityMajor, device),
                "get_link_bandwidth: cudaDeviceGetAttribute"));
  std::string why;
  const Nvml* nvml = OpenNvml(&why);
  if (nvml == nullptr || nvml->init() != kNvmlSuccess) {
    SetKind(link, "unknown: " + (nvml == nullptr ? why : "nvmlInit failed"));
    return infiniCclSuccess;
  }
  NvmlDevice handle = nullptr;
  if (nvml->handle_by_pci_bus_id(bus_id, &handle) != kNvmlSuccess) {
    nvml->shutdown();
    SetKind(link, std::string("unknown: NVML does not know the GPU at ") + bus_id);
    return infiniCclSuccess;
  }
  int active = 0;
  int generation = 0;
  for (unsigned index = 0; index < kMaxNvLinks; ++index) {
    unsigned state = 0;
    if (nvml->nvlink_state(handle, index, &state) != kNvmlSuccess) continue;
    if (state != kNvmlFeatureEnabled) continue;
    ++active;
    unsigned version = 0;
    if (generation == 0 && nvml->nvlink_version(handle, index, &version) == kNvmlSuccess) {
      generation = NvLinkGeneration(version, compute_major);
    }
  }
  if (active > 0 && NvLinkRate(generation) > 0) {
    link->peak_GBps = active * NvLinkRate(generation);
    SetKind(link, "NVLink " + std::to_string(generation) + " x " + std::to_string(active));
  } else {
    unsigned pcie_generation = 0;
    unsigned width = 0;
    if (nvml->pcie_generation(handle, &pcie_generation) == kNvmlSuccess &&
        nvml->pcie_width(handle, &width) == kNvmlSuccess && PcieLaneRate(pcie_generation) > 0) {
      link->peak_GBps = PcieLaneRate(pcie_generation) * width;
      SetKind(link, "PCIe gen" + std::to_string(pcie_generation) + " x" + std::to_string(width));
    } else {
      SetKind(link, "unknown: NVML reports no active NVLink and no PCIe link");
    }
  }
  nvml->shutdown();
  return infiniCclSuccess;
}

}  // namespace infini::ccl::nccl
