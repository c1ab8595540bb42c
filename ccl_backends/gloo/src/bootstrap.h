// NCCL-style bootstrap: the root's get_unique_id starts (once per process) a
// TCP store server and hands out its address plus a fresh nonce; every rank's
// comm_init_rank connects to that store and meets the others under the
// nonce's key prefix.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "infini/rendezvous/store.h"
#include "unique_id.h"

namespace infini::gloo_backend {

// Starts or reuses this process's store server; returns its reachable
// address with a new random nonce.
BootstrapAddress NewBootstrapAddress();

// A client of the store named by `address` (one per call: threads that wait
// concurrently each need their own connection).
std::shared_ptr<rendezvous::Store> ConnectToBootstrapStore(const BootstrapAddress& address,
                                                           std::chrono::milliseconds timeout);

}  // namespace infini::gloo_backend
