#include "rendezvous_link.h"

#include <thread>
#include <vector>

#include "infini/rendezvous/store.h"
#include "rendezvous_protocol.h"

namespace infini::launch {

using rendezvous::Store;
using rendezvous::StoreError;

void RendezvousLink::Start() {
  is_host = handler->hosts_store();
  // A change wakes the thread at once; weak: the watch may outlive the link.
  const std::chrono::milliseconds quiet_period =
      handler->StartWatch([weak = std::weak_ptr<RendezvousLink>(shared_from_this())] {
        std::shared_ptr<RendezvousLink> link = weak.lock();
        if (!link) return;
        {
          std::lock_guard lock(link->mutex);
          ++link->changes_seen;
        }
        link->wake.notify_all();
      });
  {
    std::lock_guard lock(mutex);
    started = true;
  }
  std::thread([link = shared_from_this(), quiet_period] {
    link->RunUntilStopped(quiet_period);
    {
      std::lock_guard lock(link->mutex);
      link->finished = true;
    }
    link->wake.notify_all();
  }).detach();
}

void RendezvousLink::Post(std::function<void(Store&)> write) {
  {
    std::lock_guard lock(mutex);
    writes.push_back(std::move(write));
  }
  wake.notify_all();
}

void RendezvousLink::WaitUntilFinished(std::chrono::milliseconds bound) {
  std::unique_lock lock(mutex);
  wake.wait_for(lock, bound, [&] { return !started || finished; });
}

void RendezvousLink::RunUntilStopped(std::chrono::milliseconds quiet_period) {
  try {
    while (true) {
      int attempt;
      uint64_t changes_read;
      {
        std::unique_lock lock(mutex);
        if (stop && writes.empty()) return;
        attempt = watched_attempt;
      }
      RunWrites();
      {
        // Before reading: a change reported from here on wakes the next round.
        std::lock_guard lock(mutex);
        changes_read = changes_seen;
      }
      PublishLost(handler->Watch());
      ReadPeers(attempt);
      std::unique_lock lock(mutex);
      wake.wait_for(lock, quiet_period, [&] {
        return stop || !writes.empty() || changes_seen != changes_read ||
               watched_attempt != attempt;
      });
    }
  } catch (const StoreError& error) {
    std::lock_guard lock(mutex);
    lost = error.what();
    writes.clear();
  }
}

void RendezvousLink::RunWrites() {
  while (true) {
    std::function<void(Store&)> write;
    {
      std::lock_guard lock(mutex);
      if (writes.empty()) return;
      write = std::move(writes.front());
      writes.pop_front();
      ++writes_in_flight;
    }
    write(handler->store());
    std::lock_guard lock(mutex);
    --writes_in_flight;
  }
}

void RendezvousLink::EnterRound(const RendezvousWorld& world) {
  std::lock_guard lock(mutex);
  round = world.round;
  nnodes = world.nnodes;
  node_rank = world.node_rank;
  reopen.reset();
  nodes_waiting = 0;
  done_nodes.clear();
  lost_nodes.clear();
  all_ready = all_done = all_left = false;
}

// Every node learns of a lost node through the failure key; in an elastic
// run, through the round's reopen key: the others meet again without it.
void RendezvousLink::PublishLost(const MembershipChange& change) {
  int current_round;
  {
    std::lock_guard lock(mutex);
    current_round = round;
  }
  for (const LostNode& node : change.lost) {
    {
      std::lock_guard lock(mutex);
      lost_nodes.insert(node.node_rank);
    }
    if (elastic) {
      handler->store().CompareSet(RoundKey(current_round, "reopen"), "",
                                  EncodeFailure(1, node.node_rank, node.message));
    } else {
      PublishRunFailure(handler->store(), node.node_rank, 1, node.message);
    }
  }
}

void RendezvousLink::ReadPeers(int attempt) {
  Store& store = handler->store();
  int members, self, read_round;
  {
    std::lock_guard lock(mutex);
    members = nnodes;
    self = node_rank;
    read_round = round;
  }
  std::optional<PeerFailure> seen_failure;
  if (store.Check({Key("failure")})) seen_failure = DecodeFailure(store.Get(Key("failure")));
  std::optional<PeerFailure> seen_reopen;
  int waiting = 0;
  if (elastic) {
    const std::string reopen_key = RoundKey(read_round, "reopen");
    if (store.Check({reopen_key})) seen_reopen = DecodeFailure(store.Get(reopen_key));
    // Nodes arrived for the next round (torchrun's num_nodes_waiting); a full
    // round lets them wait, or they would reopen it forever.
    const std::string next_arrived = RoundKey(read_round + 1, "arrived");
    if (members < max_nnodes && store.Check({next_arrived})) {
      waiting = static_cast<int>(store.Add(next_arrived, 0));
    }
  }
  const bool restart = store.Check({AttemptKey(attempt, "restart")});
  std::vector<std::string> ready, done;
  for (int node = 0; node < members; ++node) {
    ready.push_back(AttemptKey(attempt, "ready/" + std::to_string(node)));
    done.push_back(AttemptKey(attempt, "done/" + std::to_string(node)));
  }
  const bool every_ready = store.Check(ready);
  std::string missing;
  if (!every_ready) {
    for (int node = 0; node < members && node < 64; ++node) {
      if (!store.Check({ready[static_cast<size_t>(node)]})) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(node);
      }
    }
  }
  const bool every_done = store.Check(done);
  std::set<int> done_now;
  for (int node = 0; node < members && elastic; ++node) {
    if (store.Check({done[static_cast<size_t>(node)]})) done_now.insert(node);
  }
  bool every_left = true;
  if (is_host) {
    for (int node = 0; node < members && every_left; ++node) {
      const std::string owner_key = NodeKeys(read_round, "node", node) + "/owner";
      if (node == self || !store.Check({owner_key})) continue;
      {
        std::lock_guard lock(mutex);
        if (lost_nodes.count(node)) continue;  // it will never say goodbye
      }
      every_left = store.Check({Key("left/" + store.Get(owner_key))});
    }
  }
  std::lock_guard lock(mutex);
  if (seen_failure) failure = seen_failure;
  restart_by_attempt[attempt] = restart;
  if (round != read_round) return;  // read for a round left meanwhile
  if (seen_reopen) reopen = seen_reopen;
  nodes_waiting = waiting;
  if (watched_attempt != attempt) return;  // read for an attempt no longer watched
  done_nodes = done_now;
  all_ready = every_ready;
  missing_ready = missing;
  all_done = every_done;
  all_left = every_left;
}

}  // namespace infini::launch
