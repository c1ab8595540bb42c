#include "comm_config.h"

namespace infini::ccl::internal {

PluginConfig::PluginConfig(const CommConfig& config)
    : name_(config.name), options_(config.vendor_options) {
  if (config.blocking.has_value()) config_.blocking = *config.blocking ? 1 : 0;
  if (config.timeout_ms.has_value()) config_.timeout_ms = *config.timeout_ms;
  config_.comm_name = name_.empty() ? nullptr : name_.c_str();
  config_.allow_device_sharing = config.allow_device_sharing ? 1 : 0;
  if (config.stream_priority.has_value()) config_.stream_priority = *config.stream_priority;

  for (const VendorOption& option : options_) {
    VendorGroup* group = nullptr;
    for (auto& existing : groups_) {
      if (existing->backend == option.backend) group = existing.get();
    }
    if (group == nullptr) {
      groups_.push_back(std::make_unique<VendorGroup>());
      group = groups_.back().get();
      group->backend = option.backend;
    }
    group->keys.push_back(option.key.c_str());
    group->values.push_back(option.value.c_str());
  }
  const infiniCclExtension_t* next = nullptr;
  for (auto it = groups_.rbegin(); it != groups_.rend(); ++it) {
    VendorGroup& group = **it;
    group.extension.base.struct_size = sizeof(group.extension);
    group.extension.base.type = infiniCclExtensionVendorOptions;
    group.extension.base.next = next;
    group.extension.backend = group.backend.c_str();
    group.extension.count = group.keys.size();
    group.extension.keys = group.keys.data();
    group.extension.values = group.values.data();
    next = &group.extension.base;
  }
  config_.extensions = next;
}

}  // namespace infini::ccl::internal
