#include "infini/conformance/run_store.h"

#include <vector>

#include "infini/parallel/errors.h"
#include "infini/parallel/store_access.h"
#include "infini/parallel/store_bootstrap.h"
#include "infini/rendezvous/endpoint.h"
#include "infini/rendezvous/prefix_store.h"
#include "infini/rendezvous/run_token.h"
#include "infini/rendezvous/tcp_store.h"

namespace infini::conformance {
namespace {

// Stores of a run prove the launcher's token (INFINI_RUN_TOKEN), when any.
rendezvous::TcpStoreServerOptions ServerOptions(const std::string& host, uint16_t port) {
  rendezvous::TcpStoreServerOptions options;
  options.host = host;
  options.port = port;
  options.token = rendezvous::RunTokenFromEnvironment();
  return options;
}

}  // namespace

RunStore::RunStore(const parallel::RuntimeSettings& settings,
                   const parallel::ProcessTopology& topology, const std::string& program)
    : settings_(settings),
      program_(program),
      host_(settings.store.host),
      port_(settings.store.port),
      timeout_(settings.timeout + parallel::kStoreTimeoutMargin),
      prefix_(settings.run_id + "/" + std::to_string(settings.restart_count) + "/" + program) {
  using Kind = parallel::StoreLocation::Kind;
  if (settings.store.kind == Kind::kInProcess) {
    std::shared_ptr<rendezvous::TcpStoreServer> server =
        rendezvous::TcpStoreServer::Start(ServerOptions("127.0.0.1", 0));
    host_ = "127.0.0.1";
    port_ = server->port();
    hosted_server_ = server;
  } else if (settings.store.kind == Kind::kMaster && topology.global_proc_rank == 0) {
    const std::string listen_address =
        parallel::MasterStoreListenAddress(settings.store, topology.nnodes, program + ": ");
    try {
      hosted_server_ = std::shared_ptr<rendezvous::TcpStoreServer>(
          rendezvous::TcpStoreServer::Start(ServerOptions(listen_address, port_)));
    } catch (const rendezvous::StoreError& error) {
      throw parallel::ParallelConfigError("MASTER_PORT='" + std::to_string(port_) +
                                          "': could not host the store there (" + error.what() +
                                          "): expected a free port");
    }
    host_ = listen_address == "0.0.0.0" ? "127.0.0.1" : listen_address;
  }
}

RunStore::~RunStore() = default;

std::shared_ptr<rendezvous::Store> RunStore::Connect() const {
  std::shared_ptr<rendezvous::Store> client = parallel::ConnectToRunStore(
      host_, port_, timeout_, rendezvous::RunTokenFromEnvironment(), settings_, program_ + ": ");
  client->set_timeout(timeout_);
  auto prefixed = std::make_shared<rendezvous::PrefixStore>(prefix_, client);
  prefixed->set_timeout(timeout_);
  return prefixed;
}

std::shared_ptr<ccl::BootstrapStore> MakeBootstrap(const RunStore& store, std::string prefix) {
  return std::make_shared<parallel::StoreBootstrap>(std::move(prefix),
                                                    [&store] { return store.Connect(); });
}

}  // namespace infini::conformance
