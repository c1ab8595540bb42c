#include "bootstrap.h"

#include <unistd.h>

#include <mutex>
#include <random>
#include <string>

#include "errors.h"
#include "infini/rendezvous/tcp_store.h"
#include "network.h"

namespace infini::gloo_backend {
namespace {

// The process's store server. A forked child inherits the object but not
// its event-loop thread, so a server from another pid is abandoned (never
// stopped, which would wait for a thread that does not exist) and replaced.
struct ProcessStoreServer {
  std::mutex mutex;
  pid_t owner_pid = 0;
  std::unique_ptr<rendezvous::TcpStoreServer> server;
  std::string advertised_host;

  ~ProcessStoreServer() {
    if (owner_pid != getpid()) (void)server.release();
  }
};

ProcessStoreServer& StoreServer() {
  static ProcessStoreServer instance;
  return instance;
}

uint64_t RandomNonce() {
  std::random_device device;
  const uint64_t high = device();
  const uint64_t low = device();
  return (high << 32) ^ low;
}

}  // namespace

BootstrapAddress NewBootstrapAddress() {
  ProcessStoreServer& holder = StoreServer();
  std::lock_guard<std::mutex> lock(holder.mutex);
  if (holder.server == nullptr || holder.owner_pid != getpid()) {
    (void)holder.server.release();
    const HostAddress host = ChooseHostAddress();
    rendezvous::TcpStoreServerOptions options;
    options.host = host.is_ipv6 ? "::" : "0.0.0.0";
    options.port = 0;
    holder.server = rendezvous::TcpStoreServer::Start(options);
    holder.owner_pid = getpid();
    holder.advertised_host = host.numeric;
  }
  BootstrapAddress address;
  address.store_host = holder.advertised_host;
  address.store_port = holder.server->port();
  address.nonce = RandomNonce();
  return address;
}

std::shared_ptr<rendezvous::Store> ConnectToBootstrapStore(const BootstrapAddress& address,
                                                           std::chrono::milliseconds timeout) {
  std::shared_ptr<rendezvous::Store> client =
      rendezvous::TcpStoreClient::Connect(address.store_host, address.store_port, timeout);
  client->set_timeout(timeout);
  return client;
}

}  // namespace infini::gloo_backend
