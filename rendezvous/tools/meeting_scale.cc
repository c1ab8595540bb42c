// bin/meeting_scale: plays the meeting of R ranks on N nodes against one
// store (our TCP store, or etcd) and counts what the store carries.
//
// The meeting: every node's launcher joins (claims its node rank, agrees on
// the run config: two compare-and-sets);
// then the ranks create one world group and the TP, DP and PP groups of a
// layout (Megatron's order: TP fastest, then DP, then PP): each group's root
// publishes a 128-byte unique id and every member reads it.
//
// Protocols:
//   direct   every rank is a store client and reads each of its groups' ids
//            (what ranks do today through node 0's store);
//   relayed  each node's launcher is the only client: it publishes, in one
//            key, the ids of the cross-node groups rooted on its node, and
//            reads the keys of the nodes that root its ranks' groups; groups
//            inside one node never touch the store (the ranks would get the
//            ids from their launcher on the node): a model of batching;
//   relay    the launchers' real relay (TcpStoreServerOptions::upstream,
//            docs/rendezvous.md "Relay"; --store=tcp): a relay per node,
//            ranks as its clients doing what direct ranks do, the keys of
//            groups inside one node node-local. What node 0's store carries
//            is counted by the relays (upstream requests and connections);
//            bytes are the ranks' requests on upstream keys (an upper bound:
//            a watch that several ranks share carries its value once).
//
// Clients are driven by --threads threads (each owns several clients, one
// connection each): connect, publish, then read, so no thread ever waits on
// a key that it must still write itself.
//
//   meeting_scale --store=tcp --protocol=direct --ranks=256,1024,4096
//   meeting_scale --store=etcd --etcd_endpoints=127.0.0.1:2379 --protocol=relayed
//   meeting_scale --store=tcp --protocol=relay --ranks=256,1024

#include <gflags/gflags.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "infini/common/flags.h"
#include "infini/rendezvous/etcd_store.h"
#include "infini/rendezvous/node_local_key.h"
#include "infini/rendezvous/tcp_store.h"

DEFINE_string(store, "tcp", "tcp (a TcpStoreServer in this process) or etcd");
DEFINE_string(etcd_endpoints, "127.0.0.1:2379", "etcd members, comma-separated (--store=etcd)");
DEFINE_string(protocol, "direct",
              "direct (every rank a client), relayed (per-node launchers, modelled) or relay "
              "(the launchers' real relay, --store=tcp)");
DEFINE_string(ranks, "64,256,1024,4096", "comma-separated world sizes R");
DEFINE_int32(ranks_per_node, 8, "ranks per node (N = R / this)");
DEFINE_int32(tp, 8, "tensor-parallel size (at most ranks_per_node)");
DEFINE_int32(pp, 4, "pipeline-parallel size (DP = R / (TP * PP))");
DEFINE_int32(threads, 64, "client driver threads");
DEFINE_int32(unique_id_bytes, 128, "size of a unique id (NCCL's is 128)");

namespace {

using Clock = std::chrono::steady_clock;
using infini::rendezvous::EtcdStore;
using infini::rendezvous::EtcdStoreOptions;
using infini::rendezvous::Store;
using infini::rendezvous::TcpStoreClient;
using infini::rendezvous::TcpStoreServer;
using infini::rendezvous::TcpStoreServerOptions;

constexpr char kToken[] = "meeting-scale-secret";

// What the store carried: counted at the clients, which see every message.
struct Counters {
  std::atomic<uint64_t> messages{0};
  std::atomic<uint64_t> bytes{0};
  std::mutex mutex;
  std::set<std::string> keys_written;  // distinct keys: what the store holds
  void Wrote(const std::string& key) {
    std::lock_guard lock(mutex);
    keys_written.insert(key);
  }
};

// A Store that counts each call as one request/reply and its keys and values
// as bytes (TCP); etcd's own counters (HTTP bodies) replace these for etcd.
class CountingStore {
 public:
  // `through_relay`: a rank behind its node's relay, whose messages the
  // relay counts; only its keys and bytes on upstream keys are counted here.
  CountingStore(std::unique_ptr<Store> store, Counters* counters, bool count_bytes,
                bool through_relay = false)
      : store_(std::move(store)),
        counters_(counters),
        count_bytes_(count_bytes),
        through_relay_(through_relay) {}
  void Set(const std::string& key, const std::string& value) {
    Count(key, key.size() + value.size());
    if (!through_relay_ || !infini::rendezvous::IsNodeLocalKey(key)) counters_->Wrote(key);
    store_->Set(key, value);
  }
  std::string Get(const std::string& key) {
    std::string value = store_->Get(key);
    Count(key, key.size() + value.size());
    return value;
  }
  int64_t Add(const std::string& key, int64_t delta) {
    Count(key, key.size() + 16);
    return store_->Add(key, delta);
  }
  std::string CompareSet(const std::string& key, const std::string& expected,
                         const std::string& desired) {
    std::string value = store_->CompareSet(key, expected, desired);
    counters_->Wrote(key);
    Count(key, key.size() + expected.size() + desired.size() + value.size());
    return value;
  }
  Store& raw() { return *store_; }

 private:
  void Count(const std::string& key, size_t bytes) {
    if (through_relay_) {
      if (!infini::rendezvous::IsNodeLocalKey(key)) counters_->bytes += bytes;
      return;
    }
    ++counters_->messages;
    if (count_bytes_) counters_->bytes += bytes;
  }
  std::unique_ptr<Store> store_;
  Counters* counters_;
  bool count_bytes_;
  bool through_relay_;
};

struct Layout {
  int ranks, ranks_per_node, nodes, tp, dp, pp;
  int NodeOf(int rank) const { return rank / ranks_per_node; }
};

// A group: its store name and its members (the root is the first).
struct Group {
  std::string name;
  std::vector<int> members;
};

std::vector<Group> GroupsOf(const Layout& layout) {
  std::vector<Group> groups;
  Group world{"world", {}};
  for (int rank = 0; rank < layout.ranks; ++rank) world.members.push_back(rank);
  groups.push_back(world);
  std::map<std::string, Group> by_name;
  for (int rank = 0; rank < layout.ranks; ++rank) {
    const int tp_index = rank % layout.tp;
    const int dp_index = (rank / layout.tp) % layout.dp;
    const int pp_index = rank / (layout.tp * layout.dp);
    for (const std::string& name :
         {"tp/" + std::to_string(dp_index) + "." + std::to_string(pp_index),
          "dp/" + std::to_string(tp_index) + "." + std::to_string(pp_index),
          "pp/" + std::to_string(tp_index) + "." + std::to_string(dp_index)}) {
      Group& group = by_name[name];
      group.name = name;
      group.members.push_back(rank);
    }
  }
  for (auto& [name, group] : by_name) {
    if (group.members.size() > 1) groups.push_back(std::move(group));
  }
  return groups;
}

std::string UniqueIdFor(const std::string& group) {
  std::string id(static_cast<size_t>(FLAGS_unique_id_bytes), 'u');
  std::copy(group.begin(), group.begin() + static_cast<long>(std::min(group.size(), id.size())),
            id.begin());
  return id;
}

class Meeting {
 public:
  Meeting(const Layout& layout, const std::string& store_kind, uint16_t tcp_port,
          const std::string& prefix)
      : layout_(layout), store_kind_(store_kind), tcp_port_(tcp_port), prefix_(prefix) {}

  // `relay_port`: a rank of the relay protocol, a client of its node's relay.
  std::unique_ptr<CountingStore> Connect(uint16_t relay_port = 0) {
    if (store_kind_ == "tcp") {
      auto client = TcpStoreClient::Connect("127.0.0.1", relay_port ? relay_port : tcp_port_,
                                            std::chrono::seconds(60), kToken);
      client->set_timeout(std::chrono::seconds(300));
      return std::make_unique<CountingStore>(std::move(client), &counters_, true, relay_port != 0);
    }
    EtcdStoreOptions options;
    std::stringstream list(FLAGS_etcd_endpoints);
    for (std::string member; std::getline(list, member, ',');) options.endpoints.push_back(member);
    options.key_prefix = prefix_;
    options.request_timeout = std::chrono::seconds(60);
    auto store = EtcdStore::Connect(options);
    store->set_timeout(std::chrono::seconds(300));
    etcd_clients_.fetch_add(1);
    return std::make_unique<CountingStore>(std::move(store), &counters_, false);
  }

  // Each "actor" is one client: a node's launcher, or a rank (direct).
  struct Actor {
    int node = -1;  // a launcher
    int rank = -1;  // a rank (direct)
    std::unique_ptr<CountingStore> store;
  };

  double Run(const std::string& protocol) {
    std::vector<Actor> actors;
    for (int node = 0; node < layout_.nodes; ++node) actors.push_back({node, -1, nullptr});
    if (protocol != "relayed") {
      for (int rank = 0; rank < layout_.ranks; ++rank) actors.push_back({-1, rank, nullptr});
    }
    if (protocol == "relay") StartRelays();
    groups_ = GroupsOf(layout_);
    for (const Group& group : groups_) {
      for (int member : group.members) groups_of_rank_[member].push_back(&group);
      if (CrossesNodes(group)) {
        roots_on_node_[layout_.NodeOf(group.members.front())].push_back(&group);
        for (int member : group.members) {
          const int root_node = layout_.NodeOf(group.members.front());
          if (root_node != layout_.NodeOf(member)) {
            root_nodes_needed_[layout_.NodeOf(member)].insert(root_node);
          }
        }
      }
    }
    const int threads = std::max(1, std::min<int>(FLAGS_threads, static_cast<int>(actors.size())));
    const auto start = Clock::now();
    std::vector<std::thread> drivers;
    std::atomic<int> failures{0};
    for (int thread = 0; thread < threads; ++thread) {
      drivers.emplace_back([&, thread] {
        try {
          std::vector<Actor*> mine;
          for (size_t i = static_cast<size_t>(thread); i < actors.size();
               i += static_cast<size_t>(threads)) {
            mine.push_back(&actors[i]);
          }
          for (Actor* actor : mine) {
            actor->store = Connect(actor->rank >= 0 && !relays_.empty()
                                       ? relays_[layout_.NodeOf(actor->rank)]->port()
                                       : 0);
          }
          for (Actor* actor : mine) Publish(*actor, protocol);
          for (Actor* actor : mine) Read(*actor, protocol);
        } catch (const std::exception& error) {
          fprintf(stderr, "meeting_scale: %s\n", error.what());
          ++failures;
        }
      });
    }
    for (auto& driver : drivers) driver.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (store_kind_ == "etcd") {
      for (Actor& actor : actors) {
        const auto traffic = static_cast<EtcdStore&>(actor.store->raw()).traffic();
        counters_.bytes += traffic.bytes_sent + traffic.bytes_received;
        etcd_requests_ += traffic.requests;
      }
    }
    for (const auto& relay : relays_) {
      const infini::rendezvous::RelayCounts counts = relay->relay_counts();
      counters_.messages += counts.requests;
      relay_connections_ += counts.connections;
    }
    relays_.clear();
    if (failures) return -1;
    return seconds;
  }

  // Node 0's store's clients: the launchers, and the ranks (direct) or the
  // relays' upstream connections (relay).
  size_t clients(const std::string& protocol) const {
    return static_cast<size_t>(layout_.nodes) +
           (protocol == "direct" ? static_cast<size_t>(layout_.ranks) : 0) + relay_connections_;
  }
  Counters& counters() { return counters_; }
  uint64_t etcd_requests() const { return etcd_requests_; }

 private:
  bool CrossesNodes(const Group& group) const {
    return layout_.NodeOf(group.members.front()) != layout_.NodeOf(group.members.back());
  }

  void StartRelays() {
    for (int node = 0; node < layout_.nodes; ++node) {
      TcpStoreServerOptions options;
      options.token = kToken;
      options.upstream =
          infini::rendezvous::RelayUpstream{.host = "127.0.0.1",
                                            .port = tcp_port_,
                                            .token = kToken,
                                            .connect_timeout = std::chrono::seconds(60)};
      relays_.push_back(TcpStoreServer::Start(options));
    }
  }

  // A group's id key: node-local under the relay when the group stays on
  // one node (as parallel/'s GroupStoreKey makes it).
  std::string IdKey(const Group& group) const {
    return (!relays_.empty() && !CrossesNodes(group) ? "node-local/uid/" : "uid/") + group.name;
  }

  void Publish(Actor& actor, const std::string& protocol) {
    CountingStore& store = *actor.store;
    if (actor.node >= 0) {
      // The launcher's join, node ranks given (as schedulers do at scale):
      // claim the rank and agree on the run's config, both transactions.
      store.CompareSet("node/" + std::to_string(actor.node) + "/owner", "", "host:pid");
      store.CompareSet("config", "", "nnodes=" + std::to_string(layout_.nodes));
      if (protocol == "relayed" && roots_on_node_.count(actor.node)) {
        std::string batch;
        for (const Group* group : roots_on_node_[actor.node]) {
          batch += group->name + "=" + UniqueIdFor(group->name) + "\n";
        }
        store.Set("uids/" + std::to_string(actor.node), batch);
      }
      return;
    }
    for (const Group* group : groups_of_rank_[actor.rank]) {
      if (group->members.front() == actor.rank) store.Set(IdKey(*group), UniqueIdFor(group->name));
    }
  }

  void Read(Actor& actor, const std::string& protocol) {
    CountingStore& store = *actor.store;
    if (actor.node >= 0) {
      if (protocol != "relayed") return;
      for (int root_node : root_nodes_needed_[actor.node]) {
        store.Get("uids/" + std::to_string(root_node));
      }
      return;
    }
    for (const Group* group : groups_of_rank_[actor.rank]) {
      if (group->members.front() != actor.rank) store.Get(IdKey(*group));
    }
  }

  Layout layout_;
  std::string store_kind_;
  uint16_t tcp_port_;
  std::string prefix_;
  Counters counters_;
  std::atomic<int> etcd_clients_{0};
  uint64_t etcd_requests_ = 0;
  std::vector<Group> groups_;
  std::map<int, std::vector<const Group*>> groups_of_rank_;
  std::map<int, std::vector<const Group*>> roots_on_node_;
  std::map<int, std::set<int>> root_nodes_needed_;
  std::vector<std::unique_ptr<TcpStoreServer>> relays_;  // relay: one per node
  size_t relay_connections_ = 0;
};

void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int main(int argc, char** argv) {
  infini::flags::Parse(
      &argc, &argv,
      "meeting_scale [--store=tcp|etcd] [--protocol=direct|relayed|relay] [--ranks=N,...]",
      "Plays the meeting of R ranks on N nodes against one store and counts what the store "
      "carries.");
  RaiseOpenFileLimit();
  if (FLAGS_store != "tcp" && FLAGS_store != "etcd") {
    fprintf(stderr, "meeting_scale: --store='%s': expected tcp or etcd\n", FLAGS_store.c_str());
    return 2;
  }
  if (FLAGS_protocol != "direct" && FLAGS_protocol != "relayed" && FLAGS_protocol != "relay") {
    fprintf(stderr, "meeting_scale: --protocol='%s': expected direct, relayed or relay\n",
            FLAGS_protocol.c_str());
    return 2;
  }
  if (FLAGS_protocol == "relay" && FLAGS_store != "tcp") {
    fprintf(stderr,
            "meeting_scale: --protocol=relay: expected --store=tcp (the relay's "
            "upstream is a TCP store), not --store='%s'\n",
            FLAGS_store.c_str());
    return 2;
  }
  printf("store protocol ranks nodes tp dp pp clients keys messages bytes seconds\n");
  std::stringstream list(FLAGS_ranks);
  int run = 0;
  for (std::string item; std::getline(list, item, ',');) {
    Layout layout{};
    layout.ranks = std::stoi(item);
    layout.ranks_per_node = std::min(FLAGS_ranks_per_node, layout.ranks);
    layout.nodes = layout.ranks / layout.ranks_per_node;
    layout.tp = std::min(FLAGS_tp, layout.ranks_per_node);
    layout.pp = std::max(1, std::min(FLAGS_pp, layout.ranks / layout.tp));
    layout.dp = layout.ranks / (layout.tp * layout.pp);
    if (layout.ranks % layout.ranks_per_node || layout.ranks % (layout.tp * layout.pp)) {
      fprintf(stderr,
              "meeting_scale: --ranks=%d: expected a multiple of ranks_per_node and TP*PP\n",
              layout.ranks);
      return 2;
    }
    std::unique_ptr<TcpStoreServer> server;
    uint16_t port = 0;
    if (FLAGS_store == "tcp") {
      TcpStoreServerOptions options;
      options.host = "127.0.0.1";
      options.port = 0;
      options.token = kToken;
      server = TcpStoreServer::Start(options);
      port = server->port();
    }
    const std::string prefix =
        "meeting_scale/" + std::to_string(getpid()) + "/" + std::to_string(run++) + "/";
    double seconds;
    Meeting meeting(layout, FLAGS_store, port, prefix);
    seconds = meeting.Run(FLAGS_protocol);
    const auto& counters = meeting.counters();
    const uint64_t messages =
        FLAGS_store == "etcd" ? meeting.etcd_requests() : counters.messages.load();
    printf("%s %s %d %d %d %d %d %zu %llu %llu %llu %.3f\n", FLAGS_store.c_str(),
           FLAGS_protocol.c_str(), layout.ranks, layout.nodes, layout.tp, layout.dp, layout.pp,
           meeting.clients(FLAGS_protocol),
           static_cast<unsigned long long>(counters.keys_written.size()),
           static_cast<unsigned long long>(messages),
           static_cast<unsigned long long>(counters.bytes.load()), seconds);
    fflush(stdout);
    if (FLAGS_store == "etcd") {
      EtcdStoreOptions options;
      std::stringstream members(FLAGS_etcd_endpoints);
      for (std::string member; std::getline(members, member, ',');) {
        options.endpoints.push_back(member);
      }
      options.key_prefix = prefix;
      EtcdStore::Connect(options)->DeleteAll();
    }
    if (seconds < 0) return 1;
  }
  return 0;
}
