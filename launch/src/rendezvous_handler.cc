// What every rendezvous backend shares: the keys' encodings, the choice of
// backend, and the join written once against RendezvousHandler.
#include "infini/launch/rendezvous_handler.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "infini/launch/net_util.h"
#include "infini/rendezvous/store.h"
#include "node_slots.h"
#include "rendezvous_protocol.h"

namespace infini::launch {
namespace {

using Clock = std::chrono::steady_clock;
using rendezvous::Store;
using rendezvous::StoreError;
using std::chrono::milliseconds;

constexpr char kPrefix[] = "infini_run/";
// How often a node waiting for its round to close looks again.
constexpr milliseconds kRoundPollStep{50};

// The fields every node must agree on, in the order they are checked.
std::vector<std::pair<std::string, std::string>> ConfigFields(const LaunchOptions& options) {
  return {{"rdzv_id", options.run_id},
          {"nnodes", options.NnodesText()},
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

// --on_failure=shrink: takes slot `node_rank` when its current owner was
// lost (node_slots.h); false when it was not, or another node took it first.
bool TakeLostSlot(Store& store, const LaunchOptions& options, int node_rank,
                  const std::string& identity) {
  NodeSlots slots(options.nnodes, options.processes_per_node);
  slots.Update(store);
  const std::optional<std::string> lost_owner = slots.LostOwner(node_rank);
  if (!lost_owner) return false;
  // On etcd the lost owner's key went with its lease.
  const std::string owner_key = NodeKeys("node", node_rank) + "/owner";
  const std::string current = store.Check({owner_key}) ? store.Get(owner_key) : "";
  if (!current.empty() && current != *lost_owner) return false;
  return store.CompareSet(owner_key, current, identity) == identity;
}

// A node past --nnodes under shrink: the lowest lost slot, or one line
// (the run goes on: nothing is published).
int TakeLowestLostSlot(Store& store, const LaunchOptions& options, const std::string& identity) {
  NodeSlots slots(options.nnodes, options.processes_per_node);
  slots.Update(store);
  for (int node : slots.LostSlots()) {
    if (TakeLostSlot(store, options, node, identity)) return node;
  }
  throw LaunchError("no node slot is free for the node " + identity +
                    ": every one of --nnodes=" + std::to_string(options.nnodes) +
                    " is taken and none was lost (under --on_failure=shrink a node that arrives "
                    "late replaces a lost one)");
}

int ClaimNodeRank(RendezvousHandler& handler, const LaunchOptions& options, bool* replaces) {
  Store& store = handler.store();
  const std::string identity = NodeIdentity();
  int node_rank = options.node_rank;
  if (node_rank < 0) {
    node_rank = handler.JoinOrderRank();
    if (node_rank >= options.nnodes && options.shrink_on_failure) {
      *replaces = true;
      return TakeLowestLostSlot(store, options, identity);
    }
    if (node_rank >= options.nnodes) {
      const std::string message =
          "the node " + identity + " joined as node " + std::to_string(node_rank + 1) +
          " of --nnodes=" + std::to_string(options.nnodes) + ": too many nodes";
      PublishWhileJoining(store, node_rank, message);
      throw LaunchError(message);
    }
  }
  const std::string owner = store.CompareSet(NodeKeys("node", node_rank) + "/owner", "", identity);
  if (owner == identity && options.shrink_on_failure) {
    // A slot whose lost owner's key is gone (etcd: with its lease).
    NodeSlots slots(options.nnodes, options.processes_per_node);
    slots.Update(store);
    *replaces = slots.LostOwner(node_rank).has_value();
  }
  if (owner != identity && options.shrink_on_failure) {
    if (TakeLostSlot(store, options, node_rank, identity)) {
      *replaces = true;
      return node_rank;
    }
    // Without --node_rank the join order's rank was taken: the run goes on.
    if (options.node_rank < 0) {
      *replaces = true;
      return TakeLowestLostSlot(store, options, identity);
    }
  }
  if (owner != identity) {
    const std::string message = "two nodes claim --node_rank=" + std::to_string(node_rank) + ": " +
                                owner + " and " + identity;
    PublishWhileJoining(store, node_rank, message);
    throw LaunchError(message);
  }
  return node_rank;
}

// The round's members once it closed (waiting for it to close first).
// An open round says whom it has and whom it waits for after 5 s and every
// 30 s, as a joining node does (a round may wait up to join_timeout).
void SayWhomTheRoundWaitsFor(Store& store, const LaunchOptions& options, int round, int arrived,
                             bool minimum_reached, Clock::duration waited) {
  std::string who;
  for (int index = 0; index < arrived; ++index) {
    const std::string arrival = store.Get(RoundKey(round, "arrival/" + std::to_string(index)));
    who += (index ? ", " : "") + arrival.substr(0, arrival.find('\n'));
  }
  const std::string waits =
      minimum_reached
          ? "for more nodes up to " + std::to_string(options.nnodes) +
                " until last_call_timeout (" + Seconds(options.last_call_timeout) +
                ") after MIN arrived"
          : "for " + std::to_string(options.min_nnodes - arrived) + " more node(s) to reach " +
                std::to_string(options.min_nnodes) + " (gives up at join_timeout, " +
                Seconds(options.rendezvous_timeout) + ")";
  fprintf(stderr,
          "infini_run: round %d is open for %lld s: %d of --nnodes=%s arrived (%s); waiting %s\n",
          round,
          static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(waited).count()),
          arrived, options.NnodesText().c_str(), OneLine(who).c_str(), waits.c_str());
}

int WaitForRoundToClose(Store& store, const LaunchOptions& options, int round,
                        const std::function<bool()>& stopped) {
  const std::string closed = RoundKey(round, "closed");
  const auto started = Clock::now();
  auto next_report = started + options.FirstWaitingNote();
  std::optional<Clock::time_point> minimum_reached;
  while (true) {
    if (store.Check({closed})) return std::stoi(store.Get(closed));
    if (stopped()) throw LaunchError("stopped while waiting for round " + std::to_string(round));
    const int arrived = static_cast<int>(store.Add(RoundKey(round, "arrived"), 0));
    const auto now = Clock::now();
    if (arrived >= options.min_nnodes && !minimum_reached) minimum_reached = now;
    // Whoever sees the round complete closes it; the first count written
    // is the one every node reads.
    if (arrived >= options.nnodes ||
        (minimum_reached && now - *minimum_reached >= options.last_call_timeout)) {
      store.CompareSet(closed, "", std::to_string(std::min(arrived, options.nnodes)));
      continue;
    }
    if (!minimum_reached && now - started >= options.rendezvous_timeout) {
      throw LaunchError("timed out after " + Seconds(options.rendezvous_timeout) +
                        " waiting for at least " + std::to_string(options.min_nnodes) +
                        " nodes (--nnodes=" + options.NnodesText() + ") in round " +
                        std::to_string(round) + ": " + std::to_string(arrived) +
                        " arrived (--rdzv_conf=join_timeout)");
    }
    if (now >= next_report) {
      SayWhomTheRoundWaitsFor(store, options, round, arrived, minimum_reached.has_value(),
                              now - started);
      next_report = now + options.waiting_note_interval;
    }
    std::this_thread::sleep_for(kRoundPollStep);
  }
}

// Raises the integer at `key` to at least `value` (several nodes may).
void RaiseTo(Store& store, const std::string& key, int value) {
  std::string current = store.Check({key}) ? store.Get(key) : "";
  while (current.empty() || std::stoi(current) < value) {
    current = store.CompareSet(key, current, std::to_string(value));
    if (!store.Check({key})) current = "";  // removed meanwhile
  }
}

}  // namespace

std::string Key(const std::string& name) { return kPrefix + name; }

std::string RoundKey(int round, const std::string& name) {
  return round == 0 ? Key(name) : Key("round/" + std::to_string(round) + "/" + name);
}

std::string NodeKeys(int round, const std::string& kind, int node) {
  return RoundKey(round, kind + "/" + std::to_string(node));
}

void RaiseRunCounter(Store& store, const std::string& name, int value) {
  RaiseTo(store, Key(name), value);
}

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
    if (options.elastic()) {
      // A node arriving late starts at the newest round that closed.
      Store& store = handler.store();
      const std::string current = Key("current_round");
      const int round = store.Check({current}) ? std::stoi(store.Get(current)) : 0;
      return JoinElasticRound(handler, options, round, [] { return false; });
    }
    world.node_rank = ClaimNodeRank(handler, options, &world.replaces_lost_node);
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

RendezvousWorld JoinElasticRound(RendezvousHandler& handler, const LaunchOptions& options,
                                 int round, const std::function<bool()>& stopped) {
  Store& store = handler.store();
  const std::string identity = NodeIdentity();
  while (true) {
    const int index = static_cast<int>(store.Add(RoundKey(round, "arrived"), 1)) - 1;
    store.Set(RoundKey(round, "arrival/" + std::to_string(index)),
              identity + "\n" + (handler.hosts_store() ? "1" : "0"));
    const int members = WaitForRoundToClose(store, options, round, stopped);
    if (index >= members) {  // closed without this node: it waits for the next
      ++round;
      continue;
    }
    // Node ranks: a node hosting a store first (the TCP store's host is node
    // 0; on etcd, the node that hosts the ranks' store stays node 0), then in
    // arrival order (torchrun: join order).
    std::vector<std::pair<bool, int>> order;
    for (int member = 0; member < members; ++member) {
      const std::string arrival = store.Get(RoundKey(round, "arrival/" + std::to_string(member)));
      order.emplace_back(arrival.empty() || arrival.back() != '1', member);
    }
    std::sort(order.begin(), order.end());
    RendezvousWorld world;
    world.round = round;
    world.nnodes = members;
    for (int rank = 0; rank < members; ++rank) {
      if (order[static_cast<size_t>(rank)].second == index) world.node_rank = rank;
    }
    handler.EnterRound(round, members);
    const std::string owner_key = NodeKeys(round, "node", world.node_rank) + "/owner";
    const std::string owner = store.CompareSet(owner_key, "", identity);
    if (owner != identity) {
      throw LaunchError("two nodes claim node rank " + std::to_string(world.node_rank) +
                        " of round " + std::to_string(round) + ": " + owner + " and " + identity);
    }
    store.Set(NodeKeys(round, "node", world.node_rank) + "/host", HostName());
    handler.Announce(&world);
    world.master_addr = store.Get(RoundKey(round, "master_addr"));
    world.master_port = static_cast<uint16_t>(std::stoi(store.Get(RoundKey(round, "master_port"))));
    // Set by the survivors before they arrived, so read after the close.
    const std::string next_attempt = Key("next_attempt");
    world.first_attempt = store.Check({next_attempt}) ? std::stoi(store.Get(next_attempt)) : 0;
    world.failure_restarts = static_cast<int>(store.Add(Key("failure_restarts"), 0));
    RaiseTo(store, Key("current_round"), round);
    return world;
  }
}

}  // namespace infini::launch
