// A relay (TcpStoreServerOptions::upstream; docs/rendezvous.md, "Relay"): a
// store server whose table holds only node-local keys and whose routing
// hooks send everything else upstream on one connection (UpstreamRelay).
// The connection layer, admission, replies and the table are the server's;
// what is here is only where a request goes and how its answer comes back.
#pragma once

#include <uv.h>

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "tcp_store_server_impl.h"
#include "upstream_relay.h"

namespace infini::rendezvous::store_server {

class RelayServer final : public TcpStoreServerImpl {
 public:
  explicit RelayServer(const TcpStoreServerOptions& options) : TcpStoreServerImpl(options) {}
  ~RelayServer() override;

  RelayCounts relay_counts() const override { return relay_ ? relay_->counts() : RelayCounts{}; }

 private:
  void StartUpstream(const std::string& where) override;
  bool Route(Connection* connection, wire::Request& request) override;
  // Its clients are ranks, which send requests one by one; a batch of
  // theirs would have to be split between the table and upstream.
  bool TakesBatches() const override { return false; }
  bool RouteOnClose(Connection* connection, wire::Request& request) override;
  bool SetOnCloseElsewhere(const std::string& key, std::string& value) override;

  void WatchUpstream(const std::vector<std::string>& keys);
  static void OnUpstreamResults(uv_async_t* async);
  void TakeUpstreamResults();

  uv_async_t upstream_async_{};  // upstream results arrived
  std::unique_ptr<UpstreamRelay> relay_;
  std::unordered_set<std::string> watched_;  // keys being watched upstream
};

}  // namespace infini::rendezvous::store_server
