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

RendezvousLink::~RendezvousLink() { ::close(read_fd); }  // -1 (no eventfd): EBADF

void RendezvousLink::TellReaders() {
  const uint64_t one = 1;
  if (::write(read_fd, &one, sizeof(one)) < 0) {
    // No eventfd, or its count is full: the waits poll on.
  }
}

void RendezvousLink::Start() {
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

void RendezvousLink::Post(std::function<void(RendezvousLink&)> work) {
  {
    std::lock_guard lock(mutex);
    writes.push_back(std::move(work));
  }
  wake.notify_all();
}

void RendezvousLink::Apply(Transition transition) {
  Post([transition = std::move(transition)](RendezvousLink& link) { link.ApplyNow(transition); });
}

RecordStep RendezvousLink::ApplyNow(const Transition& transition) {
  RecordStep step = UpdateRunRecord(handler->records(), transition);
  Remember(step.record);
  return step;
}

void RendezvousLink::Remember(const RunRecord& newer) {
  std::lock_guard lock(mutex);
  if (newer.version >= record.version) record = newer;
}

void RendezvousLink::WaitUntilFinished(std::chrono::milliseconds bound) {
  std::unique_lock lock(mutex);
  wake.wait_for(lock, bound, [&] { return !started || finished; });
}

void RendezvousLink::RunUntilStopped(std::chrono::milliseconds quiet_period) {
  try {
    while (true) {
      uint64_t changes_read;
      {
        std::unique_lock lock(mutex);
        if (stop && writes.empty()) return;
      }
      RunWrites();
      {
        // Before reading: a change reported from here on wakes the next round.
        std::lock_guard lock(mutex);
        changes_read = changes_seen;
      }
      // The notice logs are read before the snapshot shows the record: a
      // shrink run's outcome is written after the losses it ended on.
      const RunRecord fresh = handler->records().Get();
      if (rules.mode.on_failure == decisions::OnFailure::kShrink) ReadSlots();
      Remember(fresh);
      RecordLosses(handler->Watch(Owners()));
      TellReaders();
      std::unique_lock lock(mutex);
      wake.wait_for(lock, quiet_period,
                    [&] { return stop || !writes.empty() || changes_seen != changes_read; });
    }
  } catch (const StoreError& error) {
    std::lock_guard lock(mutex);
    lost = error.what();
    writes.clear();
  } catch (const RunRecordError& error) {
    std::lock_guard lock(mutex);
    lost = error.what();
    writes.clear();
  }
}

void RendezvousLink::RunWrites() {
  while (true) {
    std::function<void(RendezvousLink&)> work;
    {
      std::lock_guard lock(mutex);
      if (writes.empty()) return;
      work = std::move(writes.front());
      writes.pop_front();
      ++writes_in_flight;
    }
    work(*this);
    std::lock_guard lock(mutex);
    --writes_in_flight;
  }
}

void RendezvousLink::EnterRound(const RendezvousWorld& world) {
  std::lock_guard lock(mutex);
  round = world.round;
  nnodes = world.nnodes;
  node_rank = world.node_rank;
  lost_owners.clear();
}

std::vector<std::string> RendezvousLink::Owners() {
  std::lock_guard lock(mutex);
  // An elastic record that moved to the next round has no slots for this
  // round: the last owners stand until this node enters it.
  if (record.round != round ||
      (!record.round_closed && rules.mode.membership == decisions::Membership::kElastic)) {
    return owners_;
  }
  owners_.assign(static_cast<size_t>(nnodes), "");
  for (const RunMember& member : record.members) {
    if (member.slot >= 0 && member.slot < nnodes) {
      owners_[static_cast<size_t>(member.slot)] = member.owner;
    }
  }
  return owners_;
}

// What a lost node becomes is the record's transition, which asks the
// decision table: the run's failure, a reopened round (elastic: the others
// meet again without it), or once the ranks run under shrink, a loss of its
// ranks that the launcher recording it publishes.
void RendezvousLink::RecordLosses(const MembershipChange& change) {
  for (const LostNode& node : change.lost) {
    {
      std::lock_guard lock(mutex);
      lost_owners.insert(node.owner);  // it will never say goodbye
    }
    const RecordStep step = ApplyNow([&](const RunRecord& current) {
      return record::NodeLost(current, rules, node.owner, node.connection_closed, node.message,
                              WallNow());
    });
    if (step.decision.action != decisions::Action::kShrinkInPlace) continue;
    // Only the launcher whose write recorded the loss gets kShrinkInPlace:
    // on a record where it is lost already the transition changes nothing.
    std::optional<std::string> run_failure = PublishNodeLoss(node, step.record.attempt);
    if (run_failure) {
      ApplyNow([&](const RunRecord& current) {
        return record::Fail(current, rules, node.node_rank, 1, *run_failure);
      });
      continue;
    }
    ReadSlots();  // the loss it appended, before its own snapshot can show the end
    ApplyNow([&](const RunRecord& current) { return record::Settle(current, rules); });
  }
}

std::optional<std::string> RendezvousLink::PublishNodeLoss(const LostNode& node, int attempt) {
  Store& store = handler->store();
  const std::string& owner = node.owner;
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
  const std::string& me = handler->identity();
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
  std::lock_guard lock(mutex);
  news.insert(news.end(), said.begin(), said.end());
  node_loss_lines.insert(node_loss_lines.end(), loss_lines.begin(), loss_lines.end());
}

}  // namespace infini::launch
