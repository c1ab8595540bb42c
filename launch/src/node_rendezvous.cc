// The run's protocol between launchers, written once against
// RendezvousHandler: each attempt starts when every node is ready, a node's
// failure stops or restarts every node, node 0 stays until the others have
// read the outcome. The keys are in rendezvous_protocol.h.
#include "infini/launch/node_rendezvous.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "infini/common/one_line.h"
#include "infini/launch/console.h"
#include "infini/launch/net_util.h"
#include "infini/launch/signal_watcher.h"
#include "infini/rendezvous/tcp_store.h"
#include "node_slots.h"
#include "rendezvous_link.h"
#include "rendezvous_protocol.h"

namespace infini::launch {
namespace {

using Clock = std::chrono::steady_clock;
using rendezvous::Store;
using rendezvous::StoreError;
using rendezvous::TcpStoreServer;
using rendezvous::TcpStoreServerOptions;
using std::chrono::milliseconds;

// How long the host keeps the store up for nodes that still have to read the
// outcome, and a leaving node waits for its last writes.
constexpr milliseconds kHostLinger{5000};
constexpr milliseconds kWriteFlushBound{2000};
// How long the relay tries to reach the run's store for a new upstream
// connection; past it the rank's request fails (the launcher sees the loss).
constexpr milliseconds kRelayConnectTimeout{10000};
// Poll step of the supervising thread's waits: signals are seen at once
// (the signal pipe wakes the poll), and so is the link's next snapshot
// (its read_fd); anything else within this.
constexpr milliseconds kWaitStep{20};

// Sleeps up to `duration`, waking on the link's next snapshot (`link_fd`)
// and (throwing) on SIGINT/SIGTERM/SIGHUP.
void SleepUnlessSignalled(milliseconds duration, int link_fd = -1) {
  pollfd entries[2] = {{SignalWatcher::fd(), POLLIN, 0}, {link_fd, POLLIN, 0}};
  if (poll(entries, 2, static_cast<int>(duration.count())) <= 0) return;
  uint64_t snapshots;  // drained: the next wait sleeps until the next snapshot
  if ((entries[1].revents & POLLIN) && ::read(link_fd, &snapshots, sizeof(snapshots)) < 0) {
  }
  if (!(entries[0].revents & POLLIN)) return;
  for (int signal_number : SignalWatcher::TakeSignals()) {
    if (SignalWatcher::StopsTheLauncher(signal_number)) throw Interrupted(signal_number);
  }
}

}  // namespace

std::unique_ptr<NodeRendezvous> NodeRendezvous::Establish(const LaunchOptions& given) {
  std::unique_ptr<NodeRendezvous> node(new NodeRendezvous());
  LaunchOptions options = given;
  if (!options.multi_node()) {
    // A run of one node, node 0 of the same protocol on its own TCP store:
    // its ranks, store and MASTER_ADDR are loopback, nothing is relayed.
    options.rendezvous_on_etcd = false;
    options.rendezvous_host = "127.0.0.1";
    options.local_addr.clear();
    options.relay_store = false;
  }
  node->options_ = options;
  node->handler_ = MakeRendezvousHandler(options);
  try {
    node->world_ = JoinRound(*node->handler_, options);
  } catch (...) {
    node->handler_->Shutdown([](milliseconds) {});  // no link thread yet
    throw;
  }
  node->StartRelay();
  node->link_ = std::make_shared<RendezvousLink>(node->handler_, node->world_, options);
  node->link_->record = node->handler_->records().Get();
  node->link_->ranks_store = {
      node->world_.store_addr,       node->world_.store_port, options.run_token, options.run_id,
      options.layout().world_size(), options.min_ranks,       HostName()};
  return node;
}

void NodeRendezvous::LogRelay(const std::string& line) const {
  if (relay_log_fd_ < 0) return;
  const std::string text = "node " + std::to_string(world_.node_rank) + ": " + line + "\n";
  if (::write(relay_log_fd_, text.data(), text.size()) < 0) {
    // A log for measurements: losing a line does not stop the run.
  }
}

void NodeRendezvous::StartRelay() {
  relay_.reset();
  if (!options_.relay_store) return;
  TcpStoreServerOptions relay_options;
  relay_options.host = "127.0.0.1";
  relay_options.token = options_.run_token;
  if (!options_.relay_log_path.empty()) {
    if (relay_log_fd_ < 0) {
      relay_log_fd_ =
          ::open(options_.relay_log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    if (relay_log_fd_ < 0) {
      throw LaunchError("--rdzv_conf=relay_log='" + OneLine(options_.relay_log_path) +
                        "': cannot be opened for appending: " + std::strerror(errno));
    }
    relay_options.on_upstream_request = [this](const std::string& request, const std::string& key) {
      LogRelay(request + " " + OneLine(key));
    };
  }
  relay_options.upstream = rendezvous::RelayUpstream{.host = world_.store_addr,
                                                     .port = world_.store_port,
                                                     .token = options_.run_token,
                                                     .connect_timeout = kRelayConnectTimeout};
  try {
    relay_ = TcpStoreServer::Start(relay_options);
  } catch (const StoreError& error) {
    throw LaunchError(std::string("cannot host the store relay for this node's ranks on "
                                  "127.0.0.1 (--rdzv_conf=relay=0 runs without it): ") +
                      error.what());
  }
}

std::string NodeRendezvous::ranks_store_addr() const {
  return relay_ ? "127.0.0.1" : world_.store_addr;
}

uint16_t NodeRendezvous::ranks_store_port() const {
  return relay_ ? relay_->port() : world_.store_port;
}

rendezvous::RelayCounts NodeRendezvous::relay_counts() const {
  return relay_ ? relay_->relay_counts() : rendezvous::RelayCounts{};
}

void NodeRendezvous::StartLink() { link_->Start(); }

void NodeRendezvous::PublishJoin(const loss_notice::LossNotice& join) {
  const NodeJoinEntry entry{world_.node_rank, handler_->identity(), HostName(), join};
  link_->Post([entry](RendezvousLink& link) { AppendNodeJoin(link.handler->store(), entry); });
  // Written before the ranks start: a loss of this node from then on is
  // published with these ranks.
  if (WaitForLink(kWriteFlushBound, [this] { return link_->Flushed(); })) return;
  throw LaunchError(LostMessage("telling the other nodes which ranks this node took"));
}

bool NodeRendezvous::WaitForLink(milliseconds bound, const std::function<bool()>& done) {
  const auto deadline = Clock::now() + bound;
  while (Clock::now() < deadline) {
    {
      std::lock_guard lock(link_->mutex);
      if (!link_->lost.empty()) return false;
      if (done()) return true;
    }
    SleepUnlessSignalled(kWaitStep, link_->read_fd);
  }
  return false;
}

void NodeRendezvous::SayNews() {
  std::vector<std::string> lines;
  {
    std::lock_guard lock(link_->mutex);
    lines.swap(link_->news);
  }
  for (const std::string& line : lines) Say(line);
}

std::vector<std::string> NodeRendezvous::NodeLossLines() {
  std::lock_guard lock(link_->mutex);
  return link_->node_loss_lines;
}

NodeRendezvous::~NodeRendezvous() {
  // The link ends before the relay (its counts are logged last); there is
  // none when joining failed.
  if (link_) Leave();
  if (relay_) {
    const rendezvous::RelayCounts counts = relay_->relay_counts();
    relay_.reset();
    LogRelay(
        "relay counts: requests=" + std::to_string(counts.requests) +
        " writes=" + std::to_string(counts.writes) + " watches=" + std::to_string(counts.watches) +
        " messages=" + std::to_string(counts.messages) + " bytes=" + std::to_string(counts.bytes) +
        " connections=" + std::to_string(counts.connections));
  }
  if (relay_log_fd_ >= 0) ::close(relay_log_fd_);
}

void NodeRendezvous::Leave() {
  const bool hosts = handler_->hosts_store();
  if (!hosts) {
    link_->Post([identity = handler_->identity()](RendezvousLink& link) {
      link.ApplyNow([&](const RunRecord& record) {
        return RecordStep{record::Leave(record, identity), {}};
      });
      link.handler->LeaveCleanly();
    });
    std::lock_guard lock(link_->mutex);
    link_->stop = true;  // after the queued writes
  }
  // Bounded, and a signal cuts it short: the process is ending. The host
  // keeps its store up until every node has read the outcome and left.
  try {
    WaitForLink(hosts ? kHostLinger : kWriteFlushBound,
                [&] { return link_->Flushed() && (!hosts || EveryOtherNodeLeft()); });
  } catch (const Interrupted&) {
  }
  if (hosts) RemoveRun();
  {
    std::lock_guard lock(link_->mutex);
    link_->stop = true;
  }
  link_->wake.notify_all();
  handler_->Shutdown([link = link_](milliseconds bound) { link->WaitUntilFinished(bound); });
}

bool NodeRendezvous::EveryOtherNodeLeft() const {
  const RunRecord& record = link_->record;
  const std::string me = handler_->identity();
  for (const RunMember& member : record.members) {
    if (member.owner == me || member.left || link_->lost_owners.count(member.owner)) continue;
    if (!record::IsLost(record, member.owner)) return false;
  }
  return true;
}

// Node 0, last: the others have left, or their keys expire with their
// leases. Through the link thread, which owns the connection.
void NodeRendezvous::RemoveRun() {
  link_->Post([](RendezvousLink& link) { link.handler->RemoveRun(); });
  try {
    WaitForLink(kWriteFlushBound, [this] { return link_->Flushed(); });
  } catch (const Interrupted&) {
  }
}

std::string NodeRendezvous::LostMessage(const std::string& while_doing) {
  const std::string note = StoreLossNote();
  return "lost " + StoreDescription() + " while " + while_doing + ": " + StoreLost() +
         (note.empty() ? "" : "; " + note);
}

std::string NodeRendezvous::StoreLossNote() const {
  if (!options_.elastic() || options_.rendezvous_on_etcd) return "";
  return "node 0 hosts the run's store (--rdzv_backend=c10d): its loss ends the run; use "
         "--rdzv_backend=etcd to survive any node";
}

std::optional<PeerFailure> NodeRendezvous::MembershipChanged() {
  if (!options_.elastic()) return std::nullopt;
  std::lock_guard lock(link_->mutex);
  const RunRecord& record = link_->record;
  if (record.round <= world_.round || record.outcome != RunOutcome::kRunning) return std::nullopt;
  return PeerFailure{record.reopened_for, 1, record.reopen_reason};
}

int NodeRendezvous::NextRound() {
  struct Job {
    std::mutex mutex;
    bool done = false;
    std::exception_ptr error;
    RendezvousWorld world;
  };
  auto job = std::make_shared<Job>();
  // On the link thread, which owns the connection; a StoreError ends the
  // link as any other (StoreLost).
  link_->Post([job, options = options_](RendezvousLink& link) {
    RendezvousWorld world;
    std::exception_ptr error;
    try {
      world = JoinThroughRecord(*link.handler, options, [&link] {
        std::lock_guard lock(link.mutex);
        return link.stop;
      });
      link.EnterRound(world);
    } catch (const LaunchError&) {
      error = std::current_exception();
    }
    std::lock_guard lock(job->mutex);
    job->world = world;
    job->error = error;
    job->done = true;
  });
  while (true) {
    {
      std::lock_guard lock(job->mutex);
      if (job->done) {
        if (job->error) std::rethrow_exception(job->error);
        const bool store_moved = job->world.store_addr != world_.store_addr ||
                                 job->world.store_port != world_.store_port;
        world_ = job->world;
        if (store_moved) StartRelay();
        return world_.first_attempt;
      }
    }
    {
      std::lock_guard lock(link_->mutex);
      if (!link_->lost.empty()) break;
    }
    SleepUnlessSignalled(kWaitStep, link_->read_fd);
  }
  throw LaunchError(LostMessage("meeting the other nodes again"));
}

bool NodeRendezvous::WaitAllNodesReady(int attempt) {
  const int round = world_.round;
  link_->Apply(
      [rules = link_->rules, round, attempt, me = handler_->identity()](const RunRecord& record) {
        if (record.round != round || record.attempt != attempt) return RecordStep{record, {}};
        return record::Ready(record, rules, me);
      });
  const std::string doing = "waiting for every node to start attempt " + std::to_string(attempt);
  const auto started = Clock::now();
  const auto deadline = started + options_.rendezvous_timeout;
  bool reported_missing = false;
  // Whom it waits for, after 5 s and every 30 s, as a joining node does.
  auto next_report = started + options_.FirstWaitingNote();
  while (true) {
    if (MembershipChanged()) return false;
    std::string waiting_line;
    std::string missing_owner;  // elastic: found lost while joining, to record
    int missing_node = -1;
    {
      std::lock_guard lock(link_->mutex);
      const RunRecord& record = link_->record;
      if (std::optional<PeerFailure> failure = FailureIn(record)) {
        throw LaunchError((failure->node_rank >= 0 ? "node " + std::to_string(failure->node_rank)
                                                   : std::string("a joining node")) +
                          " stopped the run while " + doing + ": " + failure->message);
      }
      if (!link_->lost.empty()) break;
      // Started, or already restarted past it (EventSeen says so).
      if (record.round == round &&
          (record.attempt > attempt || (record.attempt == attempt && record.attempt_started))) {
        return true;
      }
      const std::vector<int> missing = MissingReady(record);
      std::string missing_text;
      for (size_t i = 0; i < missing.size() && i < 64; ++i) {
        missing_text += (i ? ", " : "") + std::to_string(missing[i]);
      }
      // Elastic: every member left the round's meeting together, so one not
      // ready by now died while joining; the others meet again without it.
      if (options_.elastic() && !reported_missing && !missing.empty() &&
          Clock::now() - started >= options_.heartbeat_timeout) {
        reported_missing = true;
        missing_node = missing.front();
        for (const RunMember& member : record.members) {
          if (member.slot == missing_node) missing_owner = member.owner;
        }
      }
      if (Clock::now() >= deadline) {
        throw LaunchError("timed out after " + Seconds(options_.rendezvous_timeout) + " " + doing +
                          " (--rdzv_timeout); missing node(s) " + missing_text);
      }
      if (Clock::now() >= next_report && !missing.empty()) {
        const auto seconds = [](Clock::duration d) {
          return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count());
        };
        waiting_line = doing + " for " + seconds(Clock::now() - started) + " s: missing node(s) " +
                       missing_text + "; gives up in " + seconds(deadline - Clock::now()) +
                       " s (--rdzv_timeout " + Seconds(options_.rendezvous_timeout) + ")";
        next_report = Clock::now() + options_.waiting_note_interval;
      }
    }
    if (!waiting_line.empty()) Say(waiting_line);
    if (!missing_owner.empty()) {
      const std::string message =
          "node " + std::to_string(missing_node) + " lost while joining round " +
          std::to_string(round) + ": not ready to start attempt " + std::to_string(attempt) +
          " within " + Seconds(options_.heartbeat_timeout) + " of node " +
          std::to_string(world_.node_rank) + " (--rdzv_conf=heartbeat_timeout)";
      link_->Apply([rules = link_->rules, missing_owner, message](const RunRecord& record) {
        return record::NodeLost(record, rules, missing_owner, false, message, WallNow());
      });
    }
    SleepUnlessSignalled(kWaitStep, link_->read_fd);
  }
  throw LaunchError(LostMessage(doing));
}

std::optional<PeerFailure> NodeRendezvous::FailureIn(const RunRecord& record) {
  if (record.outcome != RunOutcome::kFailed) return std::nullopt;
  return PeerFailure{record.failed_node, record.exit_status, record.message};
}

std::vector<int> NodeRendezvous::MissingReady(const RunRecord& record) const {
  std::set<int> ready;
  for (const RunMember& member : record.members) {
    if (member.ready) ready.insert(member.slot);
  }
  for (const LostSlot& lost : record.lost) ready.insert(lost.slot);
  std::vector<int> missing;
  for (int node = 0; node < world_.nnodes; ++node) {
    if (!ready.count(node)) missing.push_back(node);
  }
  return missing;
}

std::optional<PeerFailure> NodeRendezvous::PeerFailed() {
  std::lock_guard lock(link_->mutex);
  return FailureIn(link_->record);
}

std::optional<RunEvent> NodeRendezvous::EventSeen(int attempt) {
  if (std::optional<PeerFailure> failure = PeerFailed()) {
    return RunEvent{decisions::Event::kPeerFailed, failure, "", failure->exit_status};
  }
  if (std::string loss = StoreLost(); !loss.empty()) {
    return RunEvent{decisions::Event::kStoreLost, std::nullopt, loss, 1};
  }
  if (RestartRequested(attempt)) {
    return RunEvent{decisions::Event::kRestartRequested, std::nullopt, "", 1};
  }
  if (MembershipChanged()) return MembershipEvent(false);
  return std::nullopt;
}

RunEvent NodeRendezvous::MembershipEvent(bool while_joining) {
  RunEvent change;
  change.peer = MembershipChanged();
  const bool lost = change.peer && change.peer->node_rank >= 0;
  change.event = !lost           ? decisions::Event::kNodeArrived
                 : while_joining ? decisions::Event::kNodeLostWhileJoining
                                 : decisions::Event::kNodeLost;
  return change;
}

std::optional<RunEvent> NodeRendezvous::LossBehindRankFailure(milliseconds grace) {
  const auto deadline = Clock::now() + grace;
  while (Clock::now() < deadline) {
    if (MembershipChanged()) return MembershipEvent(false);
    if (PeerFailed() || !StoreLost().empty()) return std::nullopt;
    SleepUnlessSignalled(kWaitStep, link_->read_fd);
  }
  if (MembershipChanged()) return MembershipEvent(false);
  return std::nullopt;
}

std::string NodeRendezvous::StoreLost() {
  std::lock_guard lock(link_->mutex);
  return link_->lost;
}

void NodeRendezvous::PublishFailure(int attempt, bool restart, int exit_status,
                                    const std::string& message) {
  const int node = world_.node_rank;
  link_->Apply([=, rules = link_->rules](const RunRecord& record) {
    return restart ? record::Restart(record, rules, attempt, true)
                   : record::Fail(record, rules, node, exit_status, message);
  });
}

bool NodeRendezvous::RestartRequested(int attempt) {
  std::lock_guard lock(link_->mutex);
  const RunRecord& record = link_->record;
  return record.round == world_.round && record.attempt > attempt;
}

RunEvent NodeRendezvous::WaitForOtherNodes(int attempt) {
  using decisions::Event;
  const int round = world_.round;
  link_->Apply(
      [rules = link_->rules, round, attempt, me = handler_->identity()](const RunRecord& record) {
        if (record.round != round || record.attempt != attempt) return RecordStep{record, {}};
        return record::Finish(record, rules, me);
      });
  // No deadline: the other nodes' ranks may legitimately run for days; their
  // keep-alives say whether they are still there.
  while (true) {
    SayNews();
    if (std::optional<PeerFailure> failure = PeerFailed()) {
      return {Event::kPeerFailed, failure, "", failure->exit_status};
    }
    if (RestartRequested(attempt)) return {Event::kRestartRequested, {}, "", 1};
    if (MembershipChanged()) return MembershipEvent(false);
    bool store_lost = false;
    {
      std::lock_guard lock(link_->mutex);
      const RunRecord& record = link_->record;
      if (record.outcome == RunOutcome::kSucceeded && link_->Flushed()) {
        // Every node but a lost one done: the run is over (torchrun's
        // finished agents leave too).
        if (record.failed_node >= 0) {
          return {Event::kNodeLostOthersDone, PeerFailure{record.failed_node, 0, record.message},
                  "", 0};
        }
        return {Event::kEveryNodeSucceeded, std::nullopt, "", 0};
      }
      store_lost = !link_->lost.empty();
    }
    if (store_lost) throw LaunchError(LostMessage("waiting for the other nodes to finish"));
    SleepUnlessSignalled(kWaitStep, link_->read_fd);
  }
}

std::unique_ptr<NodeRendezvous> EstablishWhileWatchingSignals(const LaunchOptions& options) {
  // A single node joins its own loopback store: nothing to wait for.
  if (!options.multi_node()) return NodeRendezvous::Establish(options);
  struct Outcome {
    std::mutex mutex;
    std::unique_ptr<NodeRendezvous> node;
    std::exception_ptr error;
    bool done = false;
  };
  auto outcome = std::make_shared<Outcome>();
  std::thread([outcome, options] {
    std::unique_ptr<NodeRendezvous> node;
    std::exception_ptr error;
    try {
      node = NodeRendezvous::Establish(options);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(outcome->mutex);
    outcome->node = std::move(node);
    outcome->error = error;
    outcome->done = true;
  }).detach();
  while (true) {
    {
      std::lock_guard lock(outcome->mutex);
      if (outcome->done) {
        if (outcome->error) std::rethrow_exception(outcome->error);
        return std::move(outcome->node);
      }
    }
    SleepUnlessSignalled(kWaitStep);
  }
}

}  // namespace infini::launch
