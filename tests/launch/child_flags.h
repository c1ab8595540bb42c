// The test children's own flags and variables (join_check_child,
// store_load_child, peer_link_child): "--name=value" from argv, a variable
// or "", and the ranks' store their launcher lent them.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "infini/rendezvous/prefix_store.h"
#include "infini/rendezvous/run_token.h"
#include "infini/rendezvous/tcp_store.h"

namespace infini::launch::testing {

inline std::string Flag(int argc, char** argv, const std::string& name,
                        const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

inline std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// The ranks' store (INFINI_STORE_ADDR/PORT, the run's token), its keys under
// "<INFINI_RUN_ID>/<INFINI_RESTART_COUNT><scope>", so each attempt has its own.
// Throws rendezvous::StoreError.
inline std::unique_ptr<rendezvous::PrefixStore> RankStore(const std::string& scope,
                                                          std::chrono::seconds timeout) {
  auto client = rendezvous::TcpStoreClient::Connect(
      Env("INFINI_STORE_ADDR"), static_cast<uint16_t>(std::atoi(Env("INFINI_STORE_PORT").c_str())),
      timeout, rendezvous::RunTokenFromEnvironment());
  client->set_timeout(timeout);
  return std::make_unique<rendezvous::PrefixStore>(
      Env("INFINI_RUN_ID") + "/" + Env("INFINI_RESTART_COUNT") + scope,
      std::shared_ptr<rendezvous::TcpStoreClient>(std::move(client)));
}

}  // namespace infini::launch::testing
