#include "config.h"

#include <cstring>
#include <string>

#include "errors.h"

namespace infini::gloo_backend {
namespace {

// A chain longer than this is a cycle (a caller's bug), not a real config.
constexpr int kMaxExtensions = 64;

[[noreturn]] void RefuseUsage(const std::string& message) {
  throw PluginError(infiniCclInvalidUsage, message);
}

void ApplyGlooOption(const std::string& key, const std::string& value, CommOptions& options) {
  const std::string named = "vendor option gloo:" + key + "='" + value + "'";
  if (key == "socket_ifname") {
    if (value.empty()) RefuseUsage(named + ": expected a network interface name, e.g. 'lo'");
    options.socket_interface = value;
    return;
  }
  RefuseUsage(named + " is unknown to the gloo backend; known keys: " + kKnownVendorOptions);
}

void ApplyVendorOptions(const infiniCclExtension_t* extension, CommOptions& options) {
  RequireArgument(
      extension->struct_size >= INFINI_CCL_STRUCT_SIZE(infiniCclVendorOptions_t, values),
      "vendor options extension struct_size " + std::to_string(extension->struct_size) +
          " is too small; expected sizeof(infiniCclVendorOptions_t)");
  const auto* vendor = reinterpret_cast<const infiniCclVendorOptions_t*>(extension);
  if (vendor->backend == nullptr || std::strcmp(vendor->backend, "gloo") != 0) return;
  RequireArgument(vendor->count == 0 || (vendor->keys != nullptr && vendor->values != nullptr),
                  "vendor options for gloo have count " + std::to_string(vendor->count) +
                      " but NULL keys or values");
  for (size_t i = 0; i < vendor->count; ++i) {
    RequireArgument(vendor->keys[i] != nullptr && vendor->values[i] != nullptr,
                    "vendor option " + std::to_string(i) + " for gloo has a NULL key or value");
    ApplyGlooOption(vendor->keys[i], vendor->values[i], options);
  }
}

}  // namespace

CommOptions ReadConfig(const infiniCclConfig_t* config, const CommOptions& defaults) {
  CommOptions options = defaults;
  if (config == nullptr) return options;
  // Read only the fields that the caller's header had.
  auto has = [config](size_t field_end) { return config->struct_size >= field_end; };
  RequireArgument(has(INFINI_CCL_STRUCT_SIZE(infiniCclConfig_t, blocking)),
                  "config->struct_size " + std::to_string(config->struct_size) +
                      " is too small; set it to sizeof(infiniCclConfig_t) "
                      "(INFINI_CCL_CONFIG_INITIALIZER)");
  if (config->blocking != INFINI_CCL_CONFIG_UNDEF_INT && config->blocking != 1) {
    RefuseUsage("config.blocking=" + std::to_string(config->blocking) +
                ": the gloo backend has only blocking communicators (every call returns once "
                "its work is done); expected 1 or unset");
  }
  if (has(INFINI_CCL_STRUCT_SIZE(infiniCclConfig_t, timeout_ms)) &&
      config->timeout_ms != INFINI_CCL_CONFIG_UNDEF_INT64) {
    if (config->timeout_ms <= 0) {
      RefuseUsage("config.timeout_ms=" + std::to_string(config->timeout_ms) +
                  ": expected a positive number of milliseconds, or unset for the default");
    }
    options.timeout = std::chrono::milliseconds(config->timeout_ms);
  }
  if (has(INFINI_CCL_STRUCT_SIZE(infiniCclConfig_t, comm_name)) && config->comm_name != nullptr) {
    options.name = config->comm_name;
  }
  // allow_device_sharing: every rank of a machine shares the host, which is
  // how this backend always works; stream_priority: there are no streams.
  if (has(INFINI_CCL_STRUCT_SIZE(infiniCclConfig_t, extensions))) {
    int seen = 0;
    for (const infiniCclExtension_t* extension = config->extensions; extension != nullptr;
         extension = extension->next) {
      RequireArgument(++seen <= kMaxExtensions, "config.extensions has more than " +
                                                    std::to_string(kMaxExtensions) +
                                                    " entries (a cycle?)");
      if (extension->type == infiniCclExtensionVendorOptions) {
        ApplyVendorOptions(extension, options);
      }
    }
  }
  return options;
}

}  // namespace infini::gloo_backend
