// What every rendezvous backend shares: the keys' encodings, the choice of
// backend, and the join written once against RendezvousHandler.
#include "infini/launch/rendezvous_handler.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "infini/launch/net_util.h"
#include "infini/rendezvous/store.h"
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

// During the join, on the thread that owns the connection: a meeting point
// that is gone cannot be told, and the other nodes notice that themselves.
void PublishWhileJoining(RendezvousHandler& handler, const LaunchOptions& options, int node,
                         const std::string& message) {
  try {
    UpdateRunRecord(handler.records(), [&](const RunRecord& record) {
      return record::Fail(record, RulesOf(options), node, 1, message);
    });
  } catch (const StoreError&) {
  } catch (const RunRecordError&) {
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
    PublishWhileJoining(handler, options, options.node_rank, message);
    throw LaunchError(message);
  }
}

// An open round says whom it has and whom it waits for after 5 s and every
// 30 s, as a joining node does (a round may wait up to join_timeout); a node
// on the wait list of a full round says that.
void SayWhomTheRoundWaitsFor(const RunRecord& record, const LaunchOptions& options,
                             Clock::duration waited) {
  std::string who;
  for (const RunMember& member : record.members) who += (who.empty() ? "" : ", ") + member.owner;
  const int arrived = static_cast<int>(record.members.size());
  const long long seconds = std::chrono::duration_cast<std::chrono::seconds>(waited).count();
  if (record.round_closed) {  // this node is on the wait list of a full round
    fprintf(stderr,
            "infini_run: round %d is full with %d of --nnodes=%s (%s), for %lld s: waiting for "
            "the next round, which opens when a member is lost\n",
            record.round, arrived, options.NnodesText().c_str(), OneLine(who).c_str(), seconds);
    return;
  }
  const std::string waits =
      arrived >= options.min_nnodes
          ? "for more nodes up to " + std::to_string(options.nnodes) +
                " until last_call_timeout (" + Seconds(options.last_call_timeout) +
                ") after MIN arrived"
          : "for " + std::to_string(options.min_nnodes - arrived) + " more node(s) to reach " +
                std::to_string(options.min_nnodes) + " (gives up at join_timeout, " +
                Seconds(options.rendezvous_timeout) + ")";
  fprintf(stderr,
          "infini_run: round %d is open for %lld s: %d of --nnodes=%s arrived (%s); waiting %s\n",
          record.round, seconds, arrived, options.NnodesText().c_str(), OneLine(who).c_str(),
          waits.c_str());
}

}  // namespace

std::string Key(const std::string& name) { return kPrefix + name; }

std::string RoundKey(int round, const std::string& name) {
  return round == 0 ? Key(name) : Key("round/" + std::to_string(round) + "/" + name);
}

std::string NodeKeys(int round, const std::string& kind, int node) {
  return RoundKey(round, kind + "/" + std::to_string(node));
}

std::string NodeIdentity() { return HostName() + ":" + std::to_string(getpid()); }

namespace {
std::string NextHandlerIdentity() {
  static std::atomic<int> handlers{0};
  const int number = ++handlers;
  return NodeIdentity() + (number == 1 ? "" : "/" + std::to_string(number));
}
}  // namespace

RendezvousHandler::RendezvousHandler() : identity_(NextHandlerIdentity()) {}

std::string Seconds(std::chrono::milliseconds duration) {
  std::ostringstream text;
  text << static_cast<double>(duration.count()) / 1000 << " s";
  return text.str();
}

std::shared_ptr<RendezvousHandler> MakeRendezvousHandler(const LaunchOptions& options) {
  return options.rendezvous_on_etcd ? MakeEtcdRendezvous(options) : MakeTcpRendezvous(options);
}

RunRules RulesOf(const LaunchOptions& options) {
  RunRules rules;
  rules.mode = decisions::ModeOf(options);
  rules.min_nodes = options.elastic() ? options.min_nnodes : options.nnodes;
  rules.max_nodes = options.nnodes;
  rules.max_restarts = options.max_restarts;
  rules.last_call_timeout = options.last_call_timeout;
  rules.join_timeout = options.rendezvous_timeout;
  return rules;
}

WallTime WallNow() {
  return std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
}

RendezvousWorld JoinRound(RendezvousHandler& handler, const LaunchOptions& options) {
  handler.Connect();
  try {
    // The TCP store's host arrives first, so a fixed world numbers it node
    // 0: the others wait for the configuration it publishes after. (An
    // elastic round ranks it first anyway, and closes only with the others.)
    if (handler.hosts_store() && !options.elastic()) {
      RendezvousWorld world = JoinThroughRecord(handler, options, [] { return false; });
      AgreeOnConfig(handler, options);
      return world;
    }
    AgreeOnConfig(handler, options);
    return JoinThroughRecord(handler, options, [] { return false; });
  } catch (const StoreError& error) {
    throw handler.JoinError(error);
  }
}

RendezvousWorld JoinThroughRecord(RendezvousHandler& handler, const LaunchOptions& options,
                                  const std::function<bool()>& stopped) {
  RunRecordStore& records = handler.records();
  const RunRules rules = RulesOf(options);
  RunMember arrival;
  arrival.owner = handler.identity();
  arrival.host = HostName();
  arrival.hosts_store = handler.hosts_store();
  arrival.requested_slot = options.elastic() ? -1 : options.node_rank;
  const auto started = Clock::now();
  auto next_report = started + options.FirstWaitingNote();
  RunRecord record = records.Get();
  if (record.version > 0 && !record::Holds(record, arrival.owner) && handler.Abandoned(record)) {
    // A dead run's record (every launcher of it gone): this run starts afresh.
    const int64_t dead = record.version;
    record = UpdateRunRecord(records, [dead](const RunRecord& current) {
               return RecordStep{current.version == dead ? RunRecord{} : current, {}};
             }).record;
  }
  while (true) {
    // Arrives where the record does not hold it (first, or dropped from an
    // open round it was lost in); else lets the open round close on time.
    const bool held = record::Holds(record, arrival.owner);
    try {
      record = UpdateRunRecord(records, [&](const RunRecord& current) {
                 if (held) return record::CloseRound(current, rules, WallNow());
                 return record::Join(current, rules, arrival, WallNow());
               }).record;
    } catch (const JoinRefused& refused) {
      if (refused.stops_the_run) {
        PublishWhileJoining(handler, options, options.node_rank, refused.what());
      }
      throw LaunchError(refused.what());
    }
    if (record.outcome != RunOutcome::kRunning) {
      throw LaunchError(record.outcome == RunOutcome::kFailed
                            ? record.message
                            : "the run finished before the node " + arrival.owner + " joined");
    }
    const RunMember* me = record::FindMember(record, arrival.owner);
    const bool fixed = !options.elastic();
    if (me != nullptr && me->slot >= 0 && (record.round_closed || fixed) &&
        !record::IsLost(record, arrival.owner)) {
      RendezvousWorld world;
      world.round = record.round;
      world.node_rank = me->slot;
      world.nnodes = fixed ? options.nnodes : static_cast<int>(record.members.size());
      world.first_attempt = record.attempt;
      world.failure_restarts = record.failure_restarts;
      for (const ReplacedSlot& replaced : record.replaced) {
        world.replaces_lost_node = world.replaces_lost_node || replaced.owner == arrival.owner;
      }
      handler.EnterRound(world.round, world.nnodes);
      handler.Announce(&world);
      return world;
    }
    if (stopped())
      throw LaunchError("stopped while waiting for round " + std::to_string(record.round));
    const auto now = Clock::now();
    if (now >= next_report) {
      SayWhomTheRoundWaitsFor(record, options, now - started);
      next_report = now + options.waiting_note_interval;
    }
    std::this_thread::sleep_for(kRoundPollStep);
    record = records.Get();
  }
}

}  // namespace infini::launch
