#include "communicator.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "collectives.h"
#include "errors.h"
#include "gloo_store.h"
#include "infini/rendezvous/prefix_store.h"
#include "network.h"

namespace infini::gloo_backend {

CommOptions ReadConfig(const infiniCclConfig_t* config, const CommOptions& defaults) {
  CommOptions options = defaults;
  if (config == nullptr) return options;
  // Read only the fields that the caller's header had.
  auto has = [config](size_t field_end) { return config->struct_size >= field_end; };
  RequireArgument(config->struct_size >= offsetof(infiniCclConfig_t, blocking),
                  "config->struct_size " + std::to_string(config->struct_size) +
                      " is too small; set it to sizeof(infiniCclConfig_t)");
  if (has(offsetof(infiniCclConfig_t, timeout_ms) + sizeof(config->timeout_ms))) {
    RequireArgument(config->timeout_ms >= 0, "config->timeout_ms " +
                                                 std::to_string(config->timeout_ms) +
                                                 " is negative; expected 0 (default) or more");
    if (config->timeout_ms > 0) options.timeout = std::chrono::milliseconds(config->timeout_ms);
  }
  if (has(offsetof(infiniCclConfig_t, comm_name) + sizeof(config->comm_name)) &&
      config->comm_name != nullptr) {
    options.name = config->comm_name;
  }
  return options;
}

Communicator::Communicator(int world_size, int rank, std::shared_ptr<rendezvous::Store> store,
                           std::string key_prefix, CommOptions options)
    : world_size_(world_size),
      rank_(rank),
      store_(std::move(store)),
      key_prefix_(std::move(key_prefix)),
      options_(std::move(options)) {}

Communicator* Communicator::Create(int world_size, int rank,
                                   std::shared_ptr<rendezvous::Store> store, std::string key_prefix,
                                   CommOptions options) {
  std::unique_ptr<Communicator, void (*)(Communicator*)> comm(
      new Communicator(world_size, rank, std::move(store), std::move(key_prefix),
                       std::move(options)),
      [](Communicator* c) { c->Release(); });
  auto keys = std::make_shared<rendezvous::PrefixStore>(comm->key_prefix_, comm->store_);
  GlooStoreAdapter adapter(keys, comm->timeout());
  auto context = std::make_shared<GlooContext>(rank, world_size);
  context->setTimeout(comm->timeout());
  auto device = SharedDevice(ChooseHostAddress());
  context->connectFullMesh(adapter, device);
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

void Communicator::Abort() {
  aborted_.store(true);
  RecordAsyncError(infiniCclAborted);
  if (context_ != nullptr && context_->transport() != nullptr) {
    context_->transport()->Abort("communicator aborted by comm_abort");
  }
}

void Communicator::ThrowIfAborted() const {
  if (aborted()) {
    throw PluginError(infiniCclAborted, "the communicator was aborted (comm_abort)");
  }
}

void Communicator::RecordAsyncError(infiniCclResult_t result) {
  infiniCclResult_t expected = infiniCclSuccess;
  async_error_.compare_exchange_strong(expected, result);
}

}  // namespace infini::gloo_backend
