// The host's bootstrap (infiniCclBootstrap_t: the group's scope of the run's
// store) as gloo's own store interface, so that gloo's full-mesh connect and
// comm_split meet through the C table directly: on the plugin's side of the
// table gloo's interface is the only one.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "infini/ccl/plugin_abi.h"

namespace infini::gloo_backend {

// Throws PluginError(infiniCclInvalidArgument) unless `bootstrap` has every
// entry this plugin calls.
void RequireUsableBootstrap(const infiniCclBootstrap_t& bootstrap);

class HostBootstrapStore : public ::gloo::rendezvous::Store {
 public:
  // Keeps a copy of the table; the host keeps its context alive for as long
  // as any communicator made or split from it lives. Gets and waits without
  // a timeout of their own wait `timeout`.
  HostBootstrapStore(const infiniCclBootstrap_t& bootstrap, std::chrono::milliseconds timeout);

  // Failures throw PluginError with the bootstrap's result code and text.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  [[noreturn]] void ThrowFailure(infiniCclResult_t result, const std::string& what) const;

  infiniCclBootstrap_t bootstrap_{};
  std::chrono::milliseconds timeout_;
};

}  // namespace infini::gloo_backend
