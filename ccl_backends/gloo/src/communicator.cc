#include "communicator.h"

#include <gloo/rendezvous/prefix_store.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "collectives.h"
#include "errors.h"
#include "network.h"

namespace infini::gloo_backend {

Communicator::Communicator(int world_size, int rank,
                           std::shared_ptr<::gloo::rendezvous::Store> store, std::string key_prefix,
                           CommOptions options)
    : world_size_(world_size),
      rank_(rank),
      store_(std::move(store)),
      key_prefix_(std::move(key_prefix)),
      options_(std::move(options)) {}

Communicator* Communicator::Create(int world_size, int rank,
                                   std::shared_ptr<::gloo::rendezvous::Store> store,
                                   std::string key_prefix, CommOptions options) {
  std::unique_ptr<Communicator, void (*)(Communicator*)> comm(
      new Communicator(world_size, rank, std::move(store), std::move(key_prefix),
                       std::move(options)),
      [](Communicator* c) { c->Release(); });
  ::gloo::rendezvous::PrefixStore keys(comm->key_prefix_, *comm->store_);
  auto context = std::make_shared<GlooContext>(rank, world_size);
  context->setTimeout(comm->timeout());
  auto device = SharedDevice(
      ChooseHostAddress(comm->options_.socket_interface, "vendor option gloo:socket_ifname"));
  context->connectFullMesh(keys, device);
  comm->context_ = std::move(context);
  // Connecting is pairwise: a fast rank may be connected to everyone while a
  // slow one still connects. Returning only when all are connected keeps a
  // rank that finishes early (and destroys its communicator) from breaking a
  // peer that is still in comm_init_rank.
  Barrier(*comm);
  return comm.release();
}

Communicator* Communicator::Split(int color, int key, const CommOptions& options) {
  // Everyone learns everyone's (color, key) with one all-gather.
  const int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(world_size_));
  AllGatherBytes(*this, mine, all.data(), sizeof(mine));
  const uint64_t split_index = next_split_index_++;
  if (color < 0) return nullptr;

  std::vector<int> members;
  for (int r = 0; r < world_size_; ++r) {
    if (all[2 * r] == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&all](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  const int new_rank =
      static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  // Keys of the new group: unique per parent (its prefix holds the nonce),
  // per split call and per color.
  std::string prefix =
      key_prefix_ + "/split" + std::to_string(split_index) + "/color" + std::to_string(color);
  return Create(static_cast<int>(members.size()), new_rank, store_, std::move(prefix), options);
}

Communicator* Communicator::Shrink(const std::vector<int32_t>& excluded, bool abort_first,
                                   const CommOptions& options) {
  if (abort_first) Revoke();
  const uint64_t shrink_index = next_shrink_index_++;
  const auto below = std::lower_bound(excluded.begin(), excluded.end(), rank_) - excluded.begin();
  const int new_rank = rank_ - static_cast<int>(below);
  const int new_size = world_size_ - static_cast<int>(excluded.size());
  // Survivors derive the same prefix; the list in it keeps two different
  // shrinks of one parent (survivors that disagree) from meeting.
  std::string prefix = key_prefix_ + "/shrink" + std::to_string(shrink_index) + "/x";
  for (int32_t rank : excluded) prefix += "." + std::to_string(rank);
  return Create(new_size, new_rank, store_, std::move(prefix), options);
}

void Communicator::Abort() {
  aborted_.store(true);
  RecordAsyncError(infiniCclAborted, "the communicator was aborted (comm_abort)");
  if (context_ != nullptr && context_->transport() != nullptr) {
    context_->transport()->Abort("communicator aborted by comm_abort");
  }
}

void Communicator::Revoke() {
  revoked_.store(true);
  {
    // The revoke is the state from now on, even where a peer's own revoke
    // already failed a pending op here (its closed connection is only how
    // the revoke reached us); an abort stays what it was.
    std::lock_guard<std::mutex> lock(async_error_mutex_);
    if (async_error_.load() != infiniCclAborted) {
      async_error_message_ = "the communicator was revoked (comm_revoke)";
      async_error_.store(infiniCclRemoteError);
    }
  }
  if (context_ != nullptr && context_->transport() != nullptr) {
    context_->transport()->Abort("communicator revoked by comm_revoke");
  }
}

void Communicator::ThrowIfAborted() const {
  if (aborted()) {
    throw PluginError(infiniCclAborted, "the communicator was aborted (comm_abort)");
  }
  if (revoked()) {
    throw PluginError(infiniCclRemoteError,
                      "the communicator was revoked (comm_revoke); shrink it or destroy it");
  }
}

void Communicator::RecordAsyncError(infiniCclResult_t result, const std::string& message) {
  std::lock_guard<std::mutex> lock(async_error_mutex_);
  if (async_error_.load() != infiniCclSuccess) return;
  async_error_message_ = message;
  async_error_.store(result);
}

const char* Communicator::async_error_message() const {
  std::lock_guard<std::mutex> lock(async_error_mutex_);
  return async_error_message_.c_str();
}

}  // namespace infini::gloo_backend
