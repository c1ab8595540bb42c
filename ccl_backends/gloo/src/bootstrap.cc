#include "bootstrap.h"

#include <unistd.h>

#include <mutex>
#include <string>

#include "errors.h"
#include "host_bootstrap_store.h"
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

// The private server's address, starting the server on first use.
//
// RUN TOKEN (the one place for it): once rendezvous offers
// TcpStoreServerOptions::token and TcpStoreClient::Connect(host, port,
// timeout, token), start the server with a random token here, carry it in
// the id's reserved bytes 24..55 (unique_id.h) and pass it to Connect in
// OpenMeetingStore, so that a stranger who reaches the port is refused.
GlooUniqueId PrivateStoreId() {
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
  GlooUniqueId id;
  id.place = MeetingPlace::kPrivateStore;
  id.store_host = holder.advertised_host;
  id.store_port = holder.server->port();
  return id;
}

}  // namespace

GlooUniqueId NewUniqueId(const infiniCclBootstrap_t* bootstrap) {
  GlooUniqueId id;
  if (bootstrap == nullptr) id = PrivateStoreId();
  id.nonce = RandomNonce();
  return id;
}

std::shared_ptr<rendezvous::Store> OpenMeetingStore(const GlooUniqueId& id,
                                                    const infiniCclBootstrap_t* bootstrap,
                                                    std::chrono::milliseconds timeout) {
  std::shared_ptr<rendezvous::Store> store;
  if (id.place == MeetingPlace::kHostBootstrap) {
    if (bootstrap == nullptr) {
      throw PluginError(infiniCclInvalidUsage,
                        "the unique id was made with the host's bootstrap, but this rank got "
                        "none; every rank of a group passes the bootstrap the root passed to "
                        "get_unique_id");
    }
    store = std::make_shared<HostBootstrapStore>(*bootstrap);
  } else {
    store = rendezvous::TcpStoreClient::Connect(id.store_host, id.store_port, timeout);
  }
  store->set_timeout(timeout);
  return store;
}

std::string GroupKeyPrefix(const GlooUniqueId& id) {
  return "infini_ccl_gloo/" + NonceHex(id.nonce);
}

}  // namespace infini::gloo_backend
