// CommConfig (C++) → infiniCclConfig_t (C ABI), with the vendor options as
// an extension chain whose strings live as long as this object.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::ccl::internal {

class PluginConfig {
 public:
  explicit PluginConfig(const CommConfig& config);
  PluginConfig(const PluginConfig&) = delete;
  PluginConfig& operator=(const PluginConfig&) = delete;

  const infiniCclConfig_t* get() const { return &config_; }

 private:
  // One extension per backend named in the options.
  struct VendorGroup {
    std::string backend;
    std::vector<const char*> keys;
    std::vector<const char*> values;
    infiniCclVendorOptions_t extension{};
  };
  std::string name_;
  std::vector<VendorOption> options_;  // owns the strings the groups point at
  std::vector<std::unique_ptr<VendorGroup>> groups_;
  infiniCclConfig_t config_ = INFINI_CCL_CONFIG_INITIALIZER;
};

}  // namespace infini::ccl::internal
