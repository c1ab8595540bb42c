// A backend per device type in one process, named together the way PyTorch
// names them (init_process_group(backend="cpu:gloo,cuda:nccl")): a framework
// that keeps one communication implementation per device type takes, for
// each call, the backend of its tensor's device.
//
//   auto backends = infini::ccl::DeviceBackends::Load("cpu:gloo,cuda:nccl");
//   backends.For(tensor.device)->CommInitRank(...)   // gloo for host tensors
//
// Spelling: TYPE:BACKEND[,TYPE:BACKEND...]. TYPE is DLPack's name of a device
// type (DeviceTypeName: cpu, cuda, rocm, ext_dev, ...) and must be the loaded
// backend's own; BACKEND is what Backend::Load takes (a name, a path), or
// TRANSPORT+DEVICE: a host transport staged through a device plugin
// (gloo+nccl, docs/ccl.md). INFINI_CCL_BACKEND and infini_run --ccl_backend
// accept the same list.
#pragma once

#include <dlpack/dlpack.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::ccl {

// DLPack's name of a device type ("cpu", "ext_dev"), or "device_type_N".
std::string DeviceTypeName(DLDeviceType type);
// The inverse, for DLPack's named types; nullopt for another name.
std::optional<DLDeviceType> DeviceTypeFromName(std::string_view name);
// Whether `spec` is a list of TYPE:BACKEND entries (it has a ':' before any
// '/', so a path stays a path).
bool IsDeviceBackendList(std::string_view spec);

class DeviceBackends {
 public:
  using Entry = std::pair<DLDeviceType, std::shared_ptr<const Backend>>;

  // Loads every backend `spec` names. A plain backend ("gloo", a path,
  // "gloo+nccl") is a list of one, for its own device type. Empty:
  // INFINI_CCL_BACKEND, else "auto". Throws LoadError (one line naming the
  // variable or flag, the value and what was expected) for an unknown type,
  // a type named twice, or a backend whose buffers are not of its type.
  static DeviceBackends Load(std::string_view spec = {},
                             std::span<const VendorOption> options = {});

  // The backend of tensors on `device`'s type. Throws
  // Error(infiniCclInvalidArgument) naming the type and the types served.
  const std::shared_ptr<const Backend>& For(DLDevice device) const;
  const std::shared_ptr<const Backend>& For(const DLTensor& tensor) const {
    return For(tensor.device);
  }
  // The accelerator's backend (the first entry not on cpu), else the cpu
  // one: what a program that knows one backend uses (Backend::Load of a
  // list returns it).
  const std::shared_ptr<const Backend>& Primary() const;
  // In the spec's order.
  const std::vector<Entry>& entries() const { return entries_; }
  // What was loaded, as given ("cpu:gloo,cuda:nccl").
  const std::string& spec() const { return spec_; }

 private:
  friend class Backend;
  // `source`: the flag or variable `spec` came from, for messages.
  static DeviceBackends LoadFrom(std::string_view spec, std::span<const VendorOption> options,
                                 const std::string& source);
  std::vector<Entry> entries_;
  std::string spec_;
};

}  // namespace infini::ccl
