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
//            docs/rendezvous.md "Relay"): a relay per node, ranks as its
//            clients doing what direct ranks do, the keys of groups inside
//            one node node-local; each relay sends upstream on one
//            connection, in batches, to node 0's TCP store (on --store=etcd
//            too, as infini_run does: there only the launchers' join goes
//            to etcd). What node 0's store carries is counted by the
//            relays: frames (messages), the requests in them, and their
//            bytes, frames whole.
//
// This process hosts only node 0's TCP store; the nodes (launchers, ranks,
// relays) run in --processes child processes, a share of the nodes each, so
// that no process's descriptors hold every rank's two ends, and this
// process's CPU time is the store's own cost (store_cpu_seconds). In each,
// clients are driven by --threads threads (each owns several clients, one
// connection each): connect, publish, then read, so no thread ever waits on
// a key that it must still write itself. Node 0's clients are its TCP
// store's connections at their most (sampled every 2 ms), plus etcd's
// clients on --store=etcd.
//
//   meeting_scale --store=tcp --protocol=direct --ranks=256,1024,4096
//   meeting_scale --store=etcd --etcd_endpoints=127.0.0.1:2379 --protocol=relayed
//   meeting_scale --store=tcp --protocol=relay --ranks=256,1024

#include <gflags/gflags.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "meeting_groups.h"

DEFINE_string(store, "tcp", "tcp (a TcpStoreServer in this process) or etcd");
DEFINE_string(etcd_endpoints, "127.0.0.1:2379", "etcd members, comma-separated (--store=etcd)");
DEFINE_string(protocol, "direct",
              "direct (every rank a client), relayed (per-node launchers, modelled) or relay "
              "(the launchers' real relay)");
DEFINE_string(ranks, "64,256,1024,4096", "comma-separated world sizes R");
DEFINE_int32(ranks_per_node, 8, "ranks per node (N = R / this)");
DEFINE_int32(tp, 8, "tensor-parallel size (at most ranks_per_node)");
DEFINE_int32(pp, 4, "pipeline-parallel size (DP = R / (TP * PP))");
DEFINE_int32(threads, 64, "client driver threads");
DEFINE_int32(unique_id_bytes, 128, "size of a unique id (NCCL's is 128)");
DEFINE_int32(processes, 4,
             "client processes, a share of the nodes each (their launchers, ranks and relays); "
             "this process hosts only node 0's TCP store");

namespace {

using Clock = std::chrono::steady_clock;
using infini::rendezvous::EtcdStore;
using infini::rendezvous::EtcdStoreOptions;
using infini::rendezvous::Store;
using infini::rendezvous::TcpStoreClient;
using infini::rendezvous::TcpStoreServer;
using infini::rendezvous::TcpStoreServerOptions;
using infini::rendezvous::meeting::Group;
using infini::rendezvous::meeting::GroupsOf;
using infini::rendezvous::meeting::Layout;

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
// as bytes, when `counted` (a TCP client of node 0's store); otherwise what
// it carries is counted elsewhere (etcd's own counters of HTTP bodies, or the
// relay's of its frames). The keys it writes are counted unless it is a
// relay's client (node 0's store counts what reaches it).
class CountingStore {
 public:
  CountingStore(std::unique_ptr<Store> store, Counters* counters, bool counted,
                bool through_relay = false)
      : store_(std::move(store)),
        counters_(counters),
        counted_(counted),
        through_relay_(through_relay) {}
  void Set(const std::string& key, const std::string& value) {
    Count(key.size() + value.size());
    if (!through_relay_) counters_->Wrote(key);
    store_->Set(key, value);
  }
  std::string Get(const std::string& key) {
    std::string value = store_->Get(key);
    Count(key.size() + value.size());
    return value;
  }
  std::string CompareSet(const std::string& key, const std::string& expected,
                         const std::string& desired) {
    std::string value = store_->CompareSet(key, expected, desired);
    counters_->Wrote(key);
    Count(key.size() + expected.size() + desired.size() + value.size());
    return value;
  }
  Store& raw() { return *store_; }

 private:
  void Count(size_t bytes) {
    if (!counted_) return;
    ++counters_->messages;
    counters_->bytes += bytes;
  }
  std::unique_ptr<Store> store_;
  Counters* counters_;
  bool counted_;
  bool through_relay_;
};

std::string UniqueIdFor(const std::string& group) {
  std::string id(static_cast<size_t>(FLAGS_unique_id_bytes), 'u');
  std::copy(group.begin(), group.begin() + static_cast<long>(std::min(group.size(), id.size())),
            id.begin());
  return id;
}

class Meeting {
 public:
  // `tcp_port`: node 0's TCP store (--store=tcp, and the relays' upstream).
  // Only the nodes [node_begin, node_end) and their ranks are played here.
  Meeting(const Layout& layout, const std::string& store_kind, uint16_t tcp_port,
          const std::string& prefix, int node_begin, int node_end)
      : layout_(layout),
        store_kind_(store_kind),
        tcp_port_(tcp_port),
        prefix_(prefix),
        node_begin_(node_begin),
        node_end_(node_end) {}

  // `through_relay`: a client of its node's relay, not of node 0's store.
  std::unique_ptr<CountingStore> ConnectTcp(uint16_t port, bool through_relay) {
    auto client = TcpStoreClient::Connect("127.0.0.1", port, std::chrono::seconds(60), kToken);
    client->set_timeout(std::chrono::seconds(300));
    return std::make_unique<CountingStore>(std::move(client), &counters_, !through_relay,
                                           through_relay);
  }

  // A client of the --store: node 0's TCP store, or etcd.
  std::unique_ptr<CountingStore> ConnectToStore() {
    if (store_kind_ == "tcp") return ConnectTcp(tcp_port_, false);
    EtcdStoreOptions options;
    std::stringstream list(FLAGS_etcd_endpoints);
    for (std::string member; std::getline(list, member, ',');) options.endpoints.push_back(member);
    options.key_prefix = prefix_;
    options.request_timeout = std::chrono::seconds(60);
    auto store = EtcdStore::Connect(options);
    store->set_timeout(std::chrono::seconds(300));
    ++report_.etcd_clients;
    return std::make_unique<CountingStore>(std::move(store), &counters_, false);
  }

  // Each "actor" is one client: a node's launcher, or a rank (direct, relay).
  struct Actor {
    int node = -1;  // a launcher
    int rank = -1;  // a rank
    std::unique_ptr<CountingStore> store;
  };

  double Run(const std::string& protocol) {
    std::vector<Actor> actors;
    for (int node = node_begin_; node < node_end_; ++node) actors.push_back({node, -1, nullptr});
    if (protocol != "relayed") {
      for (int rank = node_begin_ * layout_.ranks_per_node;
           rank < node_end_ * layout_.ranks_per_node; ++rank) {
        actors.push_back({-1, rank, nullptr});
      }
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
    std::vector<Actor*> launchers, ranks;
    for (Actor& actor : actors) (actor.node >= 0 ? launchers : ranks).push_back(&actor);
    const auto start = Clock::now();
    std::atomic<int> failures{0};
    if (protocol == "relay" && store_kind_ == "tcp") {
      // As infini_run: the launchers join, then reach node 0 only through
      // their relays (their own connections closed, but node 0's), and then
      // ranks start.
      Drive(launchers, protocol, /*close=*/true, &failures);
      Drive(ranks, protocol, /*close=*/false, &failures);
    } else {
      launchers.insert(launchers.end(), ranks.begin(), ranks.end());
      Drive(launchers, protocol, /*close=*/false, &failures);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    for (Actor& actor : actors) {
      if (auto* etcd = actor.store ? dynamic_cast<EtcdStore*>(&actor.store->raw()) : nullptr) {
        const auto traffic = etcd->traffic();
        report_.bytes += traffic.bytes_sent + traffic.bytes_received;
        report_.messages += traffic.requests;
        report_.requests += traffic.requests;
      }
    }
    report_.messages += counters_.messages;
    report_.requests += counters_.messages;
    report_.bytes += counters_.bytes;
    for (const auto& relay : relays_) {
      const infini::rendezvous::RelayCounts counts = relay->relay_counts();
      report_.messages += counts.messages;
      report_.requests += counts.requests;
      report_.bytes += counts.bytes;
    }
    relays_.clear();
    report_.failures = failures;
    report_.keys = counters_.keys_written.size();
    return seconds;
  }

  // `actors` on --threads threads, each connecting all of its share, then
  // publishing, then reading; `close`: then each but node 0's launcher closes
  // its connection.
  void Drive(const std::vector<Actor*>& actors, const std::string& protocol, bool close,
             std::atomic<int>* failures) {
    const int threads = std::max(1, std::min<int>(FLAGS_threads, static_cast<int>(actors.size())));
    std::vector<std::thread> drivers;
    for (int thread = 0; thread < threads; ++thread) {
      drivers.emplace_back([&, thread] {
        try {
          std::vector<Actor*> mine;
          for (size_t i = static_cast<size_t>(thread); i < actors.size();
               i += static_cast<size_t>(threads)) {
            mine.push_back(actors[i]);
          }
          for (Actor* actor : mine) {
            actor->store =
                actor->node >= 0 || relays_.empty()
                    ? ConnectToStore()
                    : ConnectTcp(relays_[layout_.NodeOf(actor->rank) - node_begin_]->port(), true);
          }
          for (Actor* actor : mine) Publish(*actor, protocol);
          for (Actor* actor : mine) Read(*actor, protocol);
          if (close) {
            // Node 0's launcher keeps its loopback connection to its store.
            for (Actor* actor : mine) {
              if (actor->node != 0) actor->store.reset();
            }
          }
        } catch (const std::exception& error) {
          fprintf(stderr, "meeting_scale: %s\n", error.what());
          ++*failures;
        }
      });
    }
    for (auto& driver : drivers) driver.join();
  }

  // What this process's share carried to node 0's store (and etcd).
  struct Report {
    uint64_t messages = 0;  // frames (direct: one request each)
    uint64_t requests = 0;
    uint64_t bytes = 0;
    uint64_t keys = 0;          // distinct keys written (etcd: what it holds)
    uint64_t etcd_clients = 0;  // clients of etcd
    int failures = 0;
  };
  const Report& report() const { return report_; }

 private:
  bool CrossesNodes(const Group& group) const {
    return layout_.NodeOf(group.members.front()) != layout_.NodeOf(group.members.back());
  }

  void StartRelays() {
    for (int node = node_begin_; node < node_end_; ++node) {
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
  int node_begin_;
  int node_end_;
  Counters counters_;
  Report report_;
  std::vector<Group> groups_;
  std::map<int, std::vector<const Group*>> groups_of_rank_;
  std::map<int, std::vector<const Group*>> roots_on_node_;
  std::map<int, std::set<int>> root_nodes_needed_;
  std::vector<std::unique_ptr<TcpStoreServer>> relays_;  // relay: one per node played here
};

void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

double CpuSeconds(int who) {
  rusage usage{};
  getrusage(who, &usage);
  auto seconds = [](const timeval& time) {
    return static_cast<double>(time.tv_sec) + static_cast<double>(time.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

bool WriteAll(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd, bytes, size);
    if (written <= 0) return false;
    bytes += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size) {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t got = ::read(fd, bytes, size);
    if (got <= 0) return false;
    bytes += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

// A child process: its share of the nodes, their launchers, ranks and relays.
struct Child {
  pid_t pid = -1;
  int to_child = -1;    // node 0's port, once its store listens
  int from_child = -1;  // its Meeting::Report
};

// Forks the children before this process starts any thread of its own (the
// stores), so that each starts from one thread.
std::vector<Child> ForkChildren(const Layout& layout, const std::string& prefix) {
  std::vector<Child> children;
  const int count = std::max(1, std::min(FLAGS_processes, layout.nodes));
  for (int index = 0; index < count; ++index) {
    int down[2];
    int up[2];
    if (::pipe(down) != 0 || ::pipe(up) != 0) {
      perror("meeting_scale: pipe");
      exit(1);
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      perror("meeting_scale: fork");
      exit(1);
    }
    if (pid == 0) {
      ::close(down[1]);
      ::close(up[0]);
      uint16_t port = 0;
      if (!ReadAll(down[0], &port, sizeof(port))) _exit(1);
      const int begin = layout.nodes * index / count;
      const int end = layout.nodes * (index + 1) / count;
      Meeting meeting(layout, FLAGS_store, port, prefix, begin, end);
      meeting.Run(FLAGS_protocol);
      const Meeting::Report report = meeting.report();
      _exit(WriteAll(up[1], &report, sizeof(report)) ? 0 : 1);
    }
    ::close(down[0]);
    ::close(up[1]);
    children.push_back({pid, down[1], up[0]});
  }
  return children;
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
  if (FLAGS_processes < 1) {
    fprintf(stderr, "meeting_scale: --processes=%d: expected at least 1\n", FLAGS_processes);
    return 2;
  }
  // Printed before any child is forked: they leave with _exit, never
  // flushing a copy of it.
  printf(
      "store protocol ranks nodes tp dp pp clients keys messages requests bytes seconds "
      "store_cpu_seconds\n");
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
    const std::string prefix =
        "meeting_scale/" + std::to_string(getpid()) + "/" + std::to_string(run++) + "/";
    std::vector<Child> children = ForkChildren(layout, prefix);
    // Node 0's TCP store: the launchers' (tcp), the ranks' (direct on tcp)
    // and the relays' upstream.
    std::unique_ptr<TcpStoreServer> server;
    uint16_t port = 0;
    if (FLAGS_store == "tcp" || FLAGS_protocol == "relay") {
      TcpStoreServerOptions options;
      options.token = kToken;
      server = TcpStoreServer::Start(options);
      port = server->port();
    }
    // This process runs only the store (and the sampler): its CPU time is
    // node 0's store's cost, apart from the clients'.
    std::atomic<bool> sampling{true};
    std::atomic<size_t> most_connections{0};
    double sampler_cpu_seconds = 0;
    std::thread sampler([&] {
      while (sampling) {
        if (server) most_connections = std::max(most_connections.load(), server->num_connections());
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      sampler_cpu_seconds = CpuSeconds(RUSAGE_THREAD);
    });
    const double cpu_before = CpuSeconds(RUSAGE_SELF);
    const auto start = Clock::now();
    for (const Child& child : children) WriteAll(child.to_child, &port, sizeof(port));
    Meeting::Report report;
    for (const Child& child : children) {
      Meeting::Report share;
      if (!ReadAll(child.from_child, &share, sizeof(share))) share.failures = 1;
      report.messages += share.messages;
      report.requests += share.requests;
      report.bytes += share.bytes;
      report.keys += share.keys;
      report.etcd_clients += share.etcd_clients;
      report.failures += share.failures;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    sampling = false;
    sampler.join();
    const double store_cpu_seconds = CpuSeconds(RUSAGE_SELF) - cpu_before - sampler_cpu_seconds;
    for (const Child& child : children) {
      int status = 0;
      ::waitpid(child.pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++report.failures;
      ::close(child.to_child);
      ::close(child.from_child);
    }
    // Keys: what node 0's TCP store holds, and on etcd what the clients
    // wrote there (every child writes the config key: counted once).
    const size_t keys = (server ? server->num_keys() : 0) +
                        (FLAGS_store == "etcd" ? report.keys - (children.size() - 1) : 0);
    // Node 0's clients: its TCP store's connections at their most, and etcd's.
    const size_t clients = most_connections.load() + report.etcd_clients;
    printf("%s %s %d %d %d %d %d %zu %zu %llu %llu %llu %.3f %.3f\n", FLAGS_store.c_str(),
           FLAGS_protocol.c_str(), layout.ranks, layout.nodes, layout.tp, layout.dp, layout.pp,
           clients, keys, static_cast<unsigned long long>(report.messages),
           static_cast<unsigned long long>(report.requests),
           static_cast<unsigned long long>(report.bytes), seconds,
           server ? store_cpu_seconds : 0.0);
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
    if (report.failures) return 1;
  }
  return 0;
}
