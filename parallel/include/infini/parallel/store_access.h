// How a process reaches and hosts the run's store, as every program that
// uses it does (parallel/'s Context, ccl_conformance, ccl_bench): a wait for
// an unreachable store talks on stderr, and a store hosted here listens on
// the address it was given.
//
//   [rank 1 local 1 pid 4242] waiting for the run's store at 10.0.0.1:29500
//   (MASTER_ADDR/MASTER_PORT) since 12:00:00 UTC, 5 s ago (last try: Connection
//   refused); gives up at 12:10:30 UTC, in 625 s (INFINI_CCL_TIMEOUT_S=600 + 30 s)
//
// (one line, the first after 5 s, then one every 30 s while it waits; both
// shorter with INFINI_RUN_WAITING_NOTE_S).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "infini/parallel/env_reader.h"
#include "infini/rendezvous/tcp_store.h"

namespace infini::parallel {

// The variables that named the store: "INFINI_STORE_ADDR/INFINI_STORE_PORT"
// (the launcher's), "MASTER_ADDR/MASTER_PORT" (global rank 0's), or "" for a
// store inside this process.
std::string StoreVariables(const StoreLocation& location);

// How long a process tries to reach the run's store: `store_timeout` (the
// caller's timeout for store calls, INFINI_CCL_TIMEOUT_S + kStoreTimeoutMargin
// for most), or INFINI_CCL_STORE_CONNECT_TIMEOUT_S when that is shorter.
std::chrono::milliseconds StoreConnectTimeout(const RuntimeSettings& settings,
                                              std::chrono::milliseconds store_timeout);

// A reporter for TcpStoreClient::Connect that writes the line above to
// stderr, each starting with `prefix` (e.g. "ccl_bench: ", or LogPrefix()),
// the first after 5 s (or INFINI_RUN_WAITING_NOTE_S, when shorter), then
// every 30 s (INFINI_RUN_WAITING_NOTE_S). The deadline is said as
// INFINI_CCL_STORE_CONNECT_TIMEOUT_S when set, else as INFINI_CCL_TIMEOUT_S
// (settings.timeout) plus the margin the caller added to it.
rendezvous::ConnectProgress StoreWaitReporter(const RuntimeSettings& settings, std::string prefix);

// TcpStoreClient::Connect to the run's store at host:port with that
// reporter, for StoreConnectTimeout(settings, store_timeout); when it gives
// up, its StoreError also names the variables and the timeout. A failed
// hello (StoreHandshakeError) is passed on as it is.
std::unique_ptr<rendezvous::TcpStoreClient> ConnectToRunStore(
    const std::string& host, uint16_t port, std::chrono::milliseconds store_timeout,
    const std::string& token, const RuntimeSettings& settings, const std::string& prefix);

// The address a store that global process rank 0 hosts for MASTER_ADDR
// (`location.host`) listens on (rendezvous::ChooseListenAddress). When that
// is every interface although MASTER_ADDR did not ask for it, one line on
// stderr, starting with `prefix`, says why and names MASTER_ADDR.
std::string MasterStoreListenAddress(const StoreLocation& location, int nnodes,
                                     const std::string& prefix);

}  // namespace infini::parallel
