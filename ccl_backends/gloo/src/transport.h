// gloo's TCP transport with one addition: a context can be aborted from any
// thread. Aborting signals an error on every pair, which wakes every pending
// send/recv of the context (the collective that waits on them throws) and
// closes the sockets, so the peers fail promptly too.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/context.h>
#include <gloo/transport/tcp/device.h>

#include <memory>
#include <string>

#include "network.h"

namespace infini::gloo_backend {

class AbortableTcpContext : public ::gloo::transport::tcp::Context {
 public:
  using ::gloo::transport::tcp::Context::Context;
  // Fails every pending and future operation with an IoException(`reason`).
  void Abort(const std::string& reason) { signalException(reason); }
};

class AbortableTcpDevice : public ::gloo::transport::tcp::Device {
 public:
  using ::gloo::transport::tcp::Device::Device;
  std::shared_ptr<::gloo::transport::Context> createContext(int rank, int world_size) override;
};

// The full-mesh context with access to its transport, to abort it.
class GlooContext : public ::gloo::rendezvous::Context {
 public:
  using ::gloo::rendezvous::Context::Context;
  AbortableTcpContext* transport() const;
};

// One device (one event-loop thread) per process and address, shared by all
// communicators, as PyTorch does. Re-created in a forked child.
std::shared_ptr<::gloo::transport::Device> SharedDevice(const HostAddress& address);

}  // namespace infini::gloo_backend
