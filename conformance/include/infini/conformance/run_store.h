// The run's store for programs that drive communicators themselves
// (ccl_conformance, ccl_bench): where it is, connections to it, and the
// bootstrap a plugin borrows from it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "infini/ccl/ccl.h"
#include "infini/parallel/env_reader.h"
#include "infini/rendezvous/store.h"

namespace infini::conformance {

// Connections to the store named by parallel::RuntimeSettings: the
// launcher's, the one global process 0 hosts at MASTER_PORT, or (one process
// alone) one hosted in this process. Keys live under
// "<run_id>/<restart_count>/<program>/".
class RunStore {
 public:
  // Hosts the store when this process must. Throws
  // parallel::ParallelConfigError (MASTER_PORT taken) or
  // rendezvous::StoreError.
  RunStore(const parallel::RuntimeSettings& settings, const parallel::ProcessTopology& topology,
           const std::string& program);
  ~RunStore();

  // A new connection (each thread that waits needs its own), with keys
  // under the run's prefix. While the store cannot be reached, lines on
  // stderr name it (parallel::ConnectToRunStore).
  std::shared_ptr<rendezvous::Store> Connect() const;
  const std::string& prefix() const { return prefix_; }

 private:
  std::shared_ptr<void> hosted_server_;
  parallel::RuntimeSettings settings_;  // what a wait for the store says
  std::string program_;
  std::string host_;
  uint16_t port_ = 0;
  std::chrono::milliseconds timeout_;
  std::string prefix_;
};

// The run's store lent to a plugin as its bootstrap, keys under `prefix`
// (parallel::StoreBootstrap over this run's connections).
std::shared_ptr<ccl::BootstrapStore> MakeBootstrap(const RunStore& store, std::string prefix);

}  // namespace infini::conformance
