// The host's bootstrap (infiniCclBootstrap_t: the group's scope of the run's
// store) seen as a rendezvous::Store, so that gloo's full-mesh connect and
// comm_split meet through it exactly as through the private TCP store.
#pragma once

#include <string>
#include <vector>

#include "infini/ccl/plugin_abi.h"
#include "infini/rendezvous/store.h"

namespace infini::gloo_backend {

// Throws PluginError(infiniCclInvalidArgument) unless `bootstrap` has every
// entry this plugin calls.
void RequireUsableBootstrap(const infiniCclBootstrap_t& bootstrap);

class HostBootstrapStore : public rendezvous::Store {
 public:
  // Keeps a copy of the table; the host keeps its context alive for as long
  // as any communicator made or split from it lives.
  explicit HostBootstrapStore(const infiniCclBootstrap_t& bootstrap);

  // Failures throw PluginError with the bootstrap's result code and text.
  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::Wait;
  // Not offered by the bootstrap, and never needed by this plugin.
  std::string CompareSet(const std::string& key, const std::string& expected,
                         const std::string& desired) override;
  bool DeleteKey(const std::string& key) override;
  bool Check(const std::vector<std::string>& keys) override;

 private:
  [[noreturn]] void ThrowFailure(infiniCclResult_t result, const std::string& what) const;

  infiniCclBootstrap_t bootstrap_{};
};

}  // namespace infini::gloo_backend
