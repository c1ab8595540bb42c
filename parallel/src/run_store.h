// The run's store as a rank reaches it, from the environment: the launcher's
// store, MASTER_ADDR:MASTER_PORT (hosted by global process rank 0), or one
// inside a single process. Context and UniqueIdExchange both use it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "infini/parallel/env_reader.h"
#include "infini/rendezvous/store.h"

namespace infini::parallel::internal {

struct RunStoreEndpoint {
  std::shared_ptr<void> hosted_server;  // set when this process hosts the store
  std::string host;
  uint16_t port = 0;
  std::string token;  // INFINI_RUN_TOKEN, or "" (never logged)
  // Of store calls; a connect may end sooner (StoreConnectTimeout).
  std::chrono::milliseconds store_timeout{0};
  std::string key_namespace;  // "<run_id>/<restart_count>"
  RuntimeSettings settings;   // what a wait for the store says (store_access.h)

  // A new connection whose keys live under key_namespace.
  std::shared_ptr<rendezvous::Store> Connect() const;
};

// "<run_id>/<restart_count>": where a run's keys live, so that two runs, or
// two attempts of one run, never read each other's.
std::string KeyNamespace(const RuntimeSettings& settings);

// Hosts the store when this process is the one to, and says where it is.
// Throws ParallelConfigError when MASTER_PORT cannot be hosted.
RunStoreEndpoint OpenRunStore(const Environment& environment, const ProcessTopology& topology,
                              const RuntimeSettings& settings);

// A connection to host:port proving `token`, with `timeout` for its waits,
// keys under `key_namespace`; while the store cannot be reached, lines on
// stderr name it and `settings`' variables (ConnectToRunStore).
std::shared_ptr<rendezvous::Store> ConnectRunStore(const std::string& host, uint16_t port,
                                                   std::chrono::milliseconds timeout,
                                                   const std::string& token,
                                                   const std::string& key_namespace,
                                                   const RuntimeSettings& settings);

}  // namespace infini::parallel::internal
