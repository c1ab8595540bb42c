// A BootstrapStore (C++) seen through the C ABI (infiniCclBootstrap_t), so
// that a plugin can use the run's store without any C++ crossing the ABI.
#pragma once

#include <memory>

#include "infini/ccl/ccl.h"

namespace infini::ccl::internal {

class BootstrapBridge {
 public:
  explicit BootstrapBridge(std::shared_ptr<BootstrapStore> store);
  BootstrapBridge(const BootstrapBridge&) = delete;
  BootstrapBridge& operator=(const BootstrapBridge&) = delete;

  // What the plugin is given; valid while this bridge lives.
  const infiniCclBootstrap_t* table() const { return &table_; }
  BootstrapStore& store() const { return *store_; }

 private:
  std::shared_ptr<BootstrapStore> store_;
  infiniCclBootstrap_t table_{};
};

// nullptr for a null store.
std::shared_ptr<BootstrapBridge> MakeBridge(std::shared_ptr<BootstrapStore> store);

}  // namespace infini::ccl::internal
