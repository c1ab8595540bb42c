#include "rendezvous_link.h"

#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "infini/launch/net_util.h"
#include "infini/rendezvous/store.h"
#include "rendezvous_protocol.h"

namespace infini::launch {

using rendezvous::Store;
using rendezvous::StoreError;

namespace {

// The launcher that holds node slot `node` now; empty when none does (on
// etcd a lost owner's keys go with its lease).
std::string SlotOwner(Store& store, int node) {
  const std::string key = NodeKeys("node", node) + "/owner";
  return store.Check({key}) ? store.Get(key) : "";
}

}  // namespace

RendezvousLink::~RendezvousLink() { ::close(read_fd); }  // -1 (no eventfd): EBADF

void RendezvousLink::TellReaders() {
  const uint64_t one = 1;
  if (::write(read_fd, &one, sizeof(one)) < 0) {
    // No eventfd, or its count is full: the waits poll on.
  }
}

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
    link->TellReaders();
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
      TellReaders();
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

// What a lost node becomes is the decision table's: the run's failure (the
// failure key), a reopened round (elastic: the others meet again without
// it), or once the ranks run under shrink, a loss notice of its ranks.
void RendezvousLink::PublishLost(const MembershipChange& change) {
  using decisions::Action;
  using decisions::Event;
  if (change.lost.empty()) return;
  int current_round, attempt, members;
  bool ranks_running;
  {
    std::lock_guard lock(mutex);
    current_round = round;
    attempt = watched_attempt;
    members = nnodes;
    ranks_running = all_ready;
  }
  // Read after the loss was seen: ReadPeers' last read may predate the lost
  // node's ready key, though that key reached the store before its loss.
  bool ready_after_loss = false;
  if (!ranks_running) {
    std::vector<std::string> ready;
    for (int node = 0; node < members; ++node) {
      ready.push_back(AttemptKey(attempt, "ready/" + std::to_string(node)));
    }
    ready_after_loss = handler->store().Check(ready);
  }
  for (const LostNode& node : change.lost) {
    const Event event =
        decisions::LostNodeEvent({ranks_running, ready_after_loss, node.connection_closed});
    const decisions::Decision decision = decisions::Decide(mode, event, false);
    if (decision.action == Action::kGoOn) continue;
    std::string message = node.message;
    if (decision.action == Action::kShrinkInPlace) {
      std::optional<std::string> run_failure = PublishNodeLoss(node, attempt);
      if (!run_failure) continue;
      message = *run_failure;
    }
    {
      std::lock_guard lock(mutex);
      lost_nodes.insert(node.node_rank);
    }
    if (decision.action == Action::kNewRound) {
      handler->store().CompareSet(RoundKey(current_round, "reopen"), "",
                                  EncodeFailure(1, node.node_rank, message));
    } else {
      PublishRunFailure(handler->store(), node.node_rank, 1, message);
    }
  }
}

std::optional<std::string> RendezvousLink::PublishNodeLoss(const LostNode& node, int attempt) {
  Store& store = handler->store();
  // The watch knows the owner: on etcd its keys went with its lease.
  const std::string& owner = node.owner;
  if (!ClaimNodeLoss(store, attempt, node.node_rank, owner, NodeIdentity())) return std::nullopt;
  const std::string host = owner.substr(0, owner.rfind(':'));  // "host:pid"
  // The watch's line starts "node K lost: "; the notice names the host too.
  const std::string prefix = "node " + std::to_string(node.node_rank) + " lost: ";
  const std::string why =
      node.message.rfind(prefix, 0) == 0 ? node.message.substr(prefix.size()) : node.message;
  const std::string how =
      "node " + std::to_string(node.node_rank) + " (host " + host + ") lost: " + why;
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  slots.Update(store);  // a replacement that took the slot since the last read owns other ranks
  const loss_notice::LossNotice notice{slots.RanksOf(node.node_rank), now, how};
  ShrinkSettings settings = ranks_store;
  settings.key_namespace += "/" + std::to_string(attempt);
  int left = 0;
  try {
    left = LossPublisher(settings).Publish(notice.global_ranks, how, now);
  } catch (const StoreError& error) {
    return "--on_failure=shrink: " + how + "; the loss could not be published to the ranks (" +
           OneLine(error.what()) + "); stopping every rank";
  }
  if (left < ranks_store.min_ranks) {
    return "--on_failure=shrink: " + how + "; " + std::to_string(left) + " rank" +
           (left == 1 ? "" : "s") +
           " left, fewer than --min_ranks=" + std::to_string(ranks_store.min_ranks) +
           "; stopping every rank";
  }
  AppendNodeLoss(store, {node.node_rank, owner, left, notice});
  return std::nullopt;
}

void RendezvousLink::ReadSlots() {
  slots.Update(handler->store());
  const std::string me = NodeIdentity();
  std::vector<std::string> said;
  std::vector<std::string> loss_lines;
  for (; losses_said < slots.losses().size(); ++losses_said) {
    const NodeLossEntry& loss = slots.losses()[losses_said];
    const std::string ranks = RanksText(loss.notice.global_ranks);
    if (loss.owner == me) {
      // A stalled launcher that comes back: its ranks were given up for.
      throw StoreError("this node was declared lost while its ranks ran (" + loss.notice.how + ")");
    }
    said.push_back("--on_failure=shrink: " + loss.notice.how + "; ranks " + ranks +
                   " published as lost, " + std::to_string(loss.ranks_left) +
                   (loss.ranks_left == 1 ? " rank goes" : " ranks go") + " on");
    loss_lines.push_back("lost node " + std::to_string(loss.node_rank) + " (" + loss.owner +
                         "): ranks " + ranks + ": " + loss.notice.how);
  }
  for (; joins_said < slots.joins().size(); ++joins_said) {
    const NodeJoinEntry& join = slots.joins()[joins_said];
    if (join.owner == me) continue;
    said.push_back(join.notice.how + ": ranks " + RanksText(join.notice.global_ranks) +
                   " wait to be admitted");
  }
  std::map<int, std::string> slots_lost;
  for (int node : slots.LostSlots()) slots_lost[node] = *slots.LostOwner(node);
  std::set<int> slots_replaced;
  for (const NodeJoinEntry& join : slots.joins()) slots_replaced.insert(join.node_rank);
  std::lock_guard lock(mutex);
  lost_slots = slots_lost;
  replaced_slots = slots_replaced;
  news.insert(news.end(), said.begin(), said.end());
  node_loss_lines.insert(node_loss_lines.end(), loss_lines.begin(), loss_lines.end());
}

void RendezvousLink::ReadPeers(int attempt) {
  Store& store = handler->store();
  int members, self, read_round;
  std::map<int, std::string> lost_owners;  // shrink: lost slots and who was lost there
  std::set<int> replaced;                  // shrink: slots a replacement took
  {
    std::lock_guard lock(mutex);
    members = nnodes;
    self = node_rank;
    read_round = round;
    lost_owners = lost_slots;
    replaced = replaced_slots;
  }
  // A lost slot whose owner changed is a replacement's (its join entry may
  // not be in the log yet): waited for.
  std::set<int> gone;
  for (const auto& [node, lost_owner] : lost_owners) {
    const std::string owner = SlotOwner(store, node);
    if (owner.empty() || owner == lost_owner) gone.insert(node);
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
    if (!gone.count(node)) done.push_back(AttemptKey(attempt, "done/" + std::to_string(node)));
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
  bool every_done = store.Check(done);
  // A replaced slot's done key may be its lost owner's: it must be the
  // current owner's.
  for (auto node = replaced.begin(); every_done && node != replaced.end(); ++node) {
    if (gone.count(*node)) continue;
    const std::string done_key = AttemptKey(attempt, "done/" + std::to_string(*node));
    every_done = store.Check({done_key}) && store.Get(done_key) == SlotOwner(store, *node);
  }
  std::set<int> done_now;
  for (int node = 0; node < members && elastic; ++node) {
    if (store.Check({AttemptKey(attempt, "done/" + std::to_string(node))})) done_now.insert(node);
  }
  bool every_left = true;
  if (is_host) {
    for (int node = 0; node < members && every_left; ++node) {
      const std::string owner_key = NodeKeys(read_round, "node", node) + "/owner";
      if (node == self || gone.count(node) || !store.Check({owner_key})) continue;
      {
        std::lock_guard lock(mutex);
        if (lost_nodes.count(node)) continue;  // it will never say goodbye
      }
      every_left = store.Check({Key("left/" + store.Get(owner_key))});
    }
  }
  // Last: a node that sees every other one done has read their losses.
  if (mode.on_failure == decisions::OnFailure::kShrink) ReadSlots();
  std::lock_guard lock(mutex);
  if (seen_failure) failure = seen_failure;
  restart_by_attempt[attempt] = restart;
  if (round != read_round) return;  // read for a round left meanwhile
  if (seen_reopen) reopen = seen_reopen;
  nodes_waiting = waiting;
  if (watched_attempt != attempt) return;  // read for an attempt no longer watched
  done_nodes = done_now;
  // Once every node was ready the ranks run: a lost node's ready key may go
  // (etcd: with its lease), the attempt stays started.
  all_ready = all_ready || every_ready;
  missing_ready = missing;
  all_done = every_done;
  all_left = every_left;
}

}  // namespace infini::launch
