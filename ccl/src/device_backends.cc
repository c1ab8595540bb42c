// DeviceBackends: a backend per device type ("cpu:gloo,cuda:nccl"), and
// DLPack's names of device types.
#include "infini/ccl/device_backends.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>

#include "infini/ccl/error.h"
#include "infini/common/launch_env.h"
#include "load_named.h"

namespace infini::ccl {
namespace {

struct NamedDeviceType {
  DLDeviceType type;
  std::string_view name;
};

// DLPack's own names (its Python DLDeviceType), in its order.
constexpr std::array<NamedDeviceType, 11> kDeviceTypes{{
    {kDLCPU, "cpu"},
    {kDLCUDA, "cuda"},
    {kDLCUDAHost, "cuda_host"},
    {kDLOpenCL, "opencl"},
    {kDLVulkan, "vulkan"},
    {kDLMetal, "metal"},
    {kDLVPI, "vpi"},
    {kDLROCM, "rocm"},
    {kDLROCMHost, "rocm_host"},
    {kDLExtDev, "ext_dev"},
    {kDLCUDAManaged, "cuda_managed"},
}};

std::string KnownDeviceTypes() {
  std::string known;
  for (const NamedDeviceType& named : kDeviceTypes) {
    known += (known.empty() ? "" : ", ") + std::string(named.name);
  }
  return known;
}

}  // namespace

std::string DeviceTypeName(DLDeviceType type) {
  for (const NamedDeviceType& named : kDeviceTypes) {
    if (named.type == type) return std::string(named.name);
  }
  return "device_type_" + std::to_string(static_cast<int>(type));
}

std::optional<DLDeviceType> DeviceTypeFromName(std::string_view name) {
  for (const NamedDeviceType& named : kDeviceTypes) {
    if (named.name == name) return named.type;
  }
  return std::nullopt;
}

bool IsDeviceBackendList(std::string_view spec) {
  const size_t colon = spec.find(':');
  return colon != std::string_view::npos &&
         spec.substr(0, colon).find('/') == std::string_view::npos;
}

DeviceBackends DeviceBackends::Load(std::string_view spec, std::span<const VendorOption> options) {
  std::string source = "--ccl_backend";
  if (spec.empty()) {
    const char* from_environment = std::getenv(env::kBackend);
    spec = from_environment != nullptr && *from_environment != '\0' ? from_environment : "auto";
    source = env::kBackend;
  }
  return LoadFrom(spec, options, source);
}

DeviceBackends DeviceBackends::LoadFrom(std::string_view spec,
                                        std::span<const VendorOption> options,
                                        const std::string& source) {
  DeviceBackends loaded;
  loaded.spec_ = std::string(spec);
  const std::string quoted = source + "='" + loaded.spec_ + "'";
  if (!IsDeviceBackendList(spec)) {
    auto backend = Backend::Load(spec, options);
    loaded.entries_.emplace_back(backend->info().device_type, std::move(backend));
    return loaded;
  }
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(spec.find(',', begin), spec.size());
    const std::string_view entry = spec.substr(begin, end - begin);
    const size_t colon = entry.find(':');
    if (colon == std::string_view::npos || colon + 1 == entry.size()) {
      throw LoadError(quoted + ": entry '" + std::string(entry) +
                      "': expected TYPE:BACKEND (cpu:gloo,cuda:nccl)");
    }
    const std::string type_name(entry.substr(0, colon));
    const std::optional<DLDeviceType> type = DeviceTypeFromName(type_name);
    if (!type) {
      throw LoadError(quoted + ": unknown device type '" + type_name + "' in entry '" +
                      std::string(entry) + "': expected one of " + KnownDeviceTypes());
    }
    for (const Entry& earlier : loaded.entries_) {
      if (earlier.first == *type) {
        throw LoadError(quoted + ": device type '" + type_name +
                        "' is named twice: expected one backend per device type");
      }
    }
    auto backend = internal::LoadNamed(entry.substr(colon + 1), options, source, spec, false);
    if (backend->info().device_type != *type) {
      throw LoadError(quoted + ": " + backend->info().name + " keeps its buffers on " +
                      DeviceTypeName(backend->info().device_type) + ", not " + type_name +
                      " (entry '" + std::string(entry) + "')");
    }
    loaded.entries_.emplace_back(*type, std::move(backend));
    if (end == spec.size()) break;
    begin = end + 1;
  }
  return loaded;
}

const std::shared_ptr<const Backend>& DeviceBackends::For(DLDevice device) const {
  for (const Entry& entry : entries_) {
    if (entry.first == device.device_type) return entry.second;
  }
  std::string served;
  for (const Entry& entry : entries_) {
    served += (served.empty() ? "" : ", ") + DeviceTypeName(entry.first);
  }
  throw Error(infiniCclInvalidArgument,
              "no backend for tensors on " + DeviceTypeName(device.device_type) + " in '" + spec_ +
                  "' (it serves " + served + "): expected a TYPE:BACKEND entry for it (" +
                  DeviceTypeName(device.device_type) + ":NAME in --ccl_backend)");
}

const std::shared_ptr<const Backend>& DeviceBackends::Primary() const {
  for (const Entry& entry : entries_) {
    if (entry.first != kDLCPU) return entry.second;
  }
  return entries_.front().second;
}

}  // namespace infini::ccl
