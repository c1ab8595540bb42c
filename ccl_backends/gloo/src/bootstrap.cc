#include "bootstrap.h"

#include <unistd.h>

#include <mutex>
#include <string>

#include "errors.h"
#include "gloo_store.h"
#include "host_bootstrap_store.h"
#include "infini/rendezvous/run_token.h"
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
  std::string token;  // what the server's clients prove

  ~ProcessStoreServer() {
    if (owner_pid != getpid()) (void)server.release();
  }
};

ProcessStoreServer& StoreServer() {
  static ProcessStoreServer instance;
  return instance;
}

// The private server's address, starting the server on first use. It
// listens only on the address gloo will use (the one that routes to the
// master, network.h), never on every interface, and asks its clients for a
// fresh random token that only the unique id carries: a stranger who reaches
// the port is refused without learning or changing anything.
GlooUniqueId PrivateStoreId() {
  ProcessStoreServer& holder = StoreServer();
  std::lock_guard<std::mutex> lock(holder.mutex);
  if (holder.server == nullptr || holder.owner_pid != getpid()) {
    (void)holder.server.release();
    const HostAddress host = ChooseHostAddress();
    rendezvous::TcpStoreServerOptions options;
    options.host = host.numeric;
    options.port = 0;
    options.token = rendezvous::NewRunToken();
    holder.server = rendezvous::TcpStoreServer::Start(options);
    holder.owner_pid = getpid();
    holder.advertised_host = host.numeric;
    holder.token = options.token;
  }
  GlooUniqueId id;
  id.place = MeetingPlace::kPrivateStore;
  id.store_host = holder.advertised_host;
  id.store_port = holder.server->port();
  id.store_token = holder.token;
  return id;
}

}  // namespace

GlooUniqueId NewUniqueId(const infiniCclBootstrap_t* bootstrap) {
  GlooUniqueId id;
  if (bootstrap == nullptr) id = PrivateStoreId();
  id.nonce = RandomNonce();
  return id;
}

std::shared_ptr<::gloo::rendezvous::Store> OpenMeetingStore(const GlooUniqueId& id,
                                                            const infiniCclBootstrap_t* bootstrap,
                                                            std::chrono::milliseconds timeout) {
  if (id.place == MeetingPlace::kHostBootstrap) {
    if (bootstrap == nullptr) {
      throw PluginError(infiniCclInvalidUsage,
                        "the unique id was made with the host's bootstrap, but this rank got "
                        "none; every rank of a group passes the bootstrap the root passed to "
                        "get_unique_id");
    }
    return std::make_shared<HostBootstrapStore>(*bootstrap, timeout);
  }
  std::unique_ptr<rendezvous::Store> client =
      rendezvous::TcpStoreClient::Connect(id.store_host, id.store_port, timeout, id.store_token);
  client->set_timeout(timeout);
  return std::make_shared<PrivateStore>(std::move(client), timeout);
}

std::string GroupKeyPrefix(const GlooUniqueId& id) {
  return "infini_ccl_gloo/" + NonceHex(id.nonce);
}

}  // namespace infini::gloo_backend
