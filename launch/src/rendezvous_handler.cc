// What every rendezvous backend shares: the keys' encodings, the choice of
// backend, and the join written once against RendezvousHandler.
#include "infini/launch/rendezvous_handler.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <utility>
#include <vector>

#include "infini/launch/net_util.h"
#include "infini/rendezvous/store.h"
#include "rendezvous_protocol.h"

namespace infini::launch {
namespace {

using rendezvous::Store;
using rendezvous::StoreError;

constexpr char kPrefix[] = "infini_run/";

// The fields every node must agree on, in the order they are checked.
std::vector<std::pair<std::string, std::string>> ConfigFields(const LaunchOptions& options) {
  return {{"rdzv_id", options.run_id},
          {"nnodes", std::to_string(options.nnodes)},
          {"nproc_per_node", std::to_string(options.processes_per_node)},
          {"ccl_backend", options.ccl_backend},
          {"max_restarts", std::to_string(options.max_restarts)}};
}

std::string EncodeConfig(const LaunchOptions& options) {
  std::string encoded;
  for (const auto& [name, value] : ConfigFields(options)) encoded += name + "=" + value + "\n";
  return encoded;
}

std::string FieldOf(const std::string& encoded, const std::string& name) {
  std::istringstream lines(encoded);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "=", 0) == 0) return line.substr(name.size() + 1);
  }
  return "";
}

// During the join, on the thread that owns the connection: a store that is
// gone cannot be told, and the other nodes notice that themselves.
void PublishWhileJoining(Store& store, int node, const std::string& message) {
  try {
    PublishRunFailure(store, node, 1, message);
  } catch (const StoreError&) {
  }
}

// "node 2", or "the node host:pid" before it has a rank.
std::string Me(const LaunchOptions& options) {
  return options.node_rank >= 0 ? "node " + std::to_string(options.node_rank)
                                : "the node " + NodeIdentity();
}

void AgreeOnConfig(RendezvousHandler& handler, const LaunchOptions& options) {
  const std::string mine = EncodeConfig(options);
  const AgreedConfig agreed = handler.AgreeOnConfig(mine);
  if (agreed.encoded == mine) return;
  const std::string me = Me(options);
  for (const auto& [name, value] : ConfigFields(options)) {
    const std::string theirs = FieldOf(agreed.encoded, name);
    if (theirs == value) continue;
    const std::string message = me + " disagrees with " + agreed.whose + " on --" + name + ": " +
                                agreed.holder + " has '" + OneLine(theirs) + "', " + me + " has '" +
                                OneLine(value) + "'";
    PublishWhileJoining(handler.store(), options.node_rank, message);
    throw LaunchError(message);
  }
}

int ClaimNodeRank(RendezvousHandler& handler, const LaunchOptions& options) {
  Store& store = handler.store();
  const std::string identity = NodeIdentity();
  int node_rank = options.node_rank;
  if (node_rank < 0) {
    node_rank = handler.JoinOrderRank();
    if (node_rank >= options.nnodes) {
      const std::string message =
          "the node " + identity + " joined as node " + std::to_string(node_rank + 1) +
          " of --nnodes=" + std::to_string(options.nnodes) + ": too many nodes";
      PublishWhileJoining(store, node_rank, message);
      throw LaunchError(message);
    }
  }
  const std::string owner = store.CompareSet(NodeKeys("node", node_rank) + "/owner", "", identity);
  if (owner != identity) {
    const std::string message = "two nodes claim --node_rank=" + std::to_string(node_rank) + ": " +
                                owner + " and " + identity;
    PublishWhileJoining(store, node_rank, message);
    throw LaunchError(message);
  }
  return node_rank;
}

}  // namespace

std::string Key(const std::string& name) { return kPrefix + name; }

std::string AttemptKey(int attempt, const std::string& name) {
  return Key("attempt/" + std::to_string(attempt) + "/" + name);
}

std::string NodeKeys(const std::string& kind, int node) {
  return Key(kind + "/" + std::to_string(node));
}

std::string EncodeFailure(int exit_status, int node, const std::string& message) {
  return std::to_string(exit_status) + "\n" + std::to_string(node) + "\n" + message;
}

PeerFailure DecodeFailure(const std::string& encoded) {
  std::istringstream fields(encoded);
  PeerFailure failure;
  std::string line;
  std::getline(fields, line);
  failure.exit_status = std::atoi(line.c_str());
  std::getline(fields, line);
  failure.node_rank = std::atoi(line.c_str());
  std::getline(fields, failure.message);
  return failure;
}

void PublishRunFailure(Store& store, int node, int exit_status, const std::string& message) {
  store.CompareSet(Key("failure"), "", EncodeFailure(exit_status, node, message));
}

std::string NodeIdentity() { return HostName() + ":" + std::to_string(getpid()); }

std::string Seconds(std::chrono::milliseconds duration) {
  std::ostringstream text;
  text << static_cast<double>(duration.count()) / 1000 << " s";
  return text.str();
}

std::shared_ptr<RendezvousHandler> MakeRendezvousHandler(const LaunchOptions& options) {
  return options.rendezvous_on_etcd ? MakeEtcdRendezvous(options) : MakeTcpRendezvous(options);
}

RendezvousWorld JoinRound(RendezvousHandler& handler, const LaunchOptions& options) {
  RendezvousWorld world;
  world.nnodes = options.nnodes;
  handler.Connect();
  try {
    AgreeOnConfig(handler, options);
    world.node_rank = ClaimNodeRank(handler, options);
    Store& store = handler.store();
    store.Set(NodeKeys("node", world.node_rank) + "/host", HostName());
    handler.Announce(&world);
    world.master_addr = store.Get(Key("master_addr"));
    world.master_port = static_cast<uint16_t>(std::stoi(store.Get(Key("master_port"))));
  } catch (const StoreError& error) {
    throw handler.JoinError(error);
  }
  return world;
}

}  // namespace infini::launch
