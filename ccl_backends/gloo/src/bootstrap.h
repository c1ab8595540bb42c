// Where the ranks of a group meet to exchange gloo's pair addresses.
//
// With the host's bootstrap (the run's store, lent by the host at
// get_unique_id and at init) the id carries only a nonce, and no server is
// started. Without one (NCCL-style), the root's get_unique_id starts, once
// per process, a TCP store server and puts its address in the id; every
// rank's comm_init_rank connects to it. Either way the ranks meet under
// "infini_ccl_gloo/<nonce>" in that store, seen as gloo's own store
// (host_bootstrap_store.h, gloo_store.h).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>

#include "infini/ccl/plugin_abi.h"
#include "unique_id.h"

namespace infini::gloo_backend {

// A new id: host bootstrap when `bootstrap` is given, else the process's
// private store server (started or reused).
GlooUniqueId NewUniqueId(const infiniCclBootstrap_t* bootstrap);

// The store named by `id`: `bootstrap` (required for a host-bootstrap id)
// or a new client of the root's private server (one per call: threads that
// wait concurrently each need their own connection). Waits use `timeout`.
std::shared_ptr<::gloo::rendezvous::Store> OpenMeetingStore(const GlooUniqueId& id,
                                                            const infiniCclBootstrap_t* bootstrap,
                                                            std::chrono::milliseconds timeout);

// Store keys of the group named by `id`.
std::string GroupKeyPrefix(const GlooUniqueId& id);

}  // namespace infini::gloo_backend
