#include "infini/launch/loss_publisher.h"

#include <chrono>
#include <set>

#include "infini/common/loss_notice.h"
#include "infini/common/one_line.h"
#include "infini/common/rank_layout.h"
#include "infini/launch/console.h"
#include "infini/rendezvous/prefix_store.h"
#include "infini/rendezvous/tcp_store.h"

namespace infini::launch {
namespace {

// A loss must be published quickly or not at all: the survivors are waiting.
constexpr std::chrono::seconds kStoreTimeout{10};

}  // namespace

LossPublisher::LossPublisher(ShrinkSettings settings) : settings_(std::move(settings)) {}

rendezvous::Store& LossPublisher::store() {
  if (store_ == nullptr) {
    std::shared_ptr<rendezvous::Store> client = rendezvous::TcpStoreClient::Connect(
        settings_.store_host, settings_.store_port, kStoreTimeout, settings_.run_token);
    client->set_timeout(kStoreTimeout);
    store_ = std::make_shared<rendezvous::PrefixStore>(settings_.key_namespace, std::move(client));
  }
  return *store_;
}

int LossPublisher::Publish(const std::vector<int>& global_ranks, const std::string& how,
                           int64_t unix_ms) {
  store();
  const int64_t number = store_->Add(loss_notice::kCountKey, 1);
  store_->Set(loss_notice::NoticeKey(number), loss_notice::Format({global_ranks, unix_ms, how}));
  // Every node's notices so far: the ranks left are the run's, not this node's.
  std::set<int> lost;
  for (int64_t n = 1; n <= number; ++n) {
    if (const auto notice = loss_notice::Parse(store_->Get(loss_notice::NoticeKey(n)))) {
      lost.insert(notice->global_ranks.begin(), notice->global_ranks.end());
    }
  }
  // Replacement nodes' ranks count as the run's too (loss_notice.h, "Joins").
  const int64_t joined = store_->Add(loss_notice::kJoinNextRankKey, 0);
  return settings_.world_size + static_cast<int>(joined) - static_cast<int>(lost.size());
}

JoinBlock LossPublisher::TakeJoinBlock(int processes_per_node, const std::string& how,
                                       int64_t unix_ms) {
  rendezvous::Store& ranks_store = store();
  const int64_t given = ranks_store.Add(loss_notice::kJoinNextRankKey, processes_per_node);
  JoinBlock block;
  block.world_size = settings_.world_size + static_cast<int>(given);
  block.notice.global_ranks =
      RankLayout::JoinedAfterEveryNode(block.world_size, processes_per_node).ProcessRanksOfNode();
  block.notice.unix_ms = unix_ms;
  block.notice.how = how;
  block.number = ranks_store.Add(loss_notice::kJoinCountKey, 1);
  ranks_store.Set(loss_notice::JoinNoticeKey(block.number), loss_notice::Format(block.notice));
  return block;
}

std::function<bool(const RankExit&)> MakeShrinkHandler(const ShrinkSettings& settings) {
  auto publisher = std::make_shared<LossPublisher>(settings);
  return [publisher, settings](const RankExit& rank) {
    const std::string who = "rank " + std::to_string(rank.global_rank) + " (pid " +
                            std::to_string(rank.pid) + " on " + settings.host_name + ")";
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    int left = 0;
    try {
      left = publisher->Publish({rank.global_rank}, rank.Describe(), now);
    } catch (const rendezvous::StoreError& error) {
      Say("--on_failure=shrink: " + who + " was lost (" + rank.Describe() +
          ") and the loss could not be published (" + OneLine(error.what()) +
          "); stopping every rank");
      return false;
    }
    if (left < settings.min_ranks) {
      Say("--on_failure=shrink: " + who + " was lost (" + rank.Describe() + "); " +
          std::to_string(left) + " rank" + (left == 1 ? "" : "s") +
          " left, fewer than --min_ranks=" + std::to_string(settings.min_ranks) +
          "; stopping every rank");
      return false;
    }
    Say("--on_failure=shrink: " + who + " was lost (" + rank.Describe() + "); " +
        std::to_string(left) + (left == 1 ? " rank goes" : " ranks go") +
        " on (loss published to the ranks)");
    return true;
  };
}

}  // namespace infini::launch
