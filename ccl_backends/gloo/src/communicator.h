// One rank's membership in a gloo group: the full-mesh gloo context, the
// store it met the others through (the host's bootstrap or the root's
// private store; kept for comm_split), and the state that comm_abort and
// comm_get_async_error need.
//
// Lifetime: the handle owns one reference; every call in flight holds one
// more. comm_destroy/comm_abort drop the handle's reference, so an abort
// from another thread never frees the object under a blocked collective:
// the collective fails promptly (its sockets are signalled) and its own
// reference is the last.
#pragma once

#include <gloo/rendezvous/store.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config.h"
#include "infini/ccl/plugin_abi.h"
#include "transport.h"

namespace infini::gloo_backend {

class Communicator {
 public:
  // Collective over the `world_size` ranks that use the same `key_prefix`
  // in `store`: every rank publishes its address there and connects to all.
  static Communicator* Create(int world_size, int rank,
                              std::shared_ptr<::gloo::rendezvous::Store> store,
                              std::string key_prefix, CommOptions options);

  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::shared_ptr<GlooContext>& context() const { return context_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  const std::string& name() const { return options_.name; }
  const CommOptions& options() const { return options_; }

  // Tag of the next collective: its sequence number (every rank calls
  // collectives in the same order) in the low 16 bits, and 16 bits of what
  // every rank must pass alike (`agreed`: Agreement(kind, sizes, root)) in
  // the high ones. Ranks that disagree on a size then use different slots:
  // gloo never delivers a message larger than the buffer posted for it
  // (which aborts the process on gloo's transport thread), and the mismatch
  // ends as the communicator's timeout, an error on every rank.
  uint32_t NextCollectiveTag(uint64_t agreed = 0) {
    const uint32_t folded =
        static_cast<uint32_t>(agreed ^ (agreed >> 16) ^ (agreed >> 32) ^ (agreed >> 48)) & 0xFFFFu;
    return (next_tag_++ & 0xFFFFu) | (folded << 16);
  }
  // FNV-1a over the values every rank of a collective passes alike.
  static uint64_t Agreement(std::initializer_list<uint64_t> values) {
    uint64_t hash = 1469598103934665603ULL;
    for (uint64_t value : values) {
      for (int byte = 0; byte < 8; ++byte) {
        hash ^= (value >> (8 * byte)) & 0xFF;
        hash *= 1099511628211ULL;
      }
    }
    return hash;
  }

  // Collective (ncclCommSplit): nullptr for color < 0.
  Communicator* Split(int color, int key, const CommOptions& options);

  // Collective over the ranks not in `excluded` (sorted, distinct, not
  // this rank): a new communicator of them, ranks renumbered, met through
  // this one's store under keys of its own (this communicator's prefix, its
  // shrink count and the list), so no key of this context is reused and
  // no excluded rank needs to be alive. `abort_first` revokes this
  // communicator before (a blocked call waiting on a dead peer returns).
  Communicator* Shrink(const std::vector<int32_t>& excluded, bool abort_first,
                       const CommOptions& options);

  // Fails the blocked and future operations of this communicator.
  void Abort();
  bool aborted() const { return aborted_.load(); }
  // Fails the blocked and future operations with infiniCclRemoteError;
  // Shrink and destroy still work (MPI_Comm_revoke).
  void Revoke();
  bool revoked() const { return revoked_.load(); }
  // Throws PluginError(infiniCclAborted) once Abort ran, and
  // PluginError(infiniCclRemoteError) once Revoke ran.
  void ThrowIfAborted() const;

  // Keeps the first error that left the communicator unusable (a dead peer,
  // a timeout, an abort) with its one-line explanation; later ones are
  // dropped, so the text never changes once set.
  void RecordAsyncError(infiniCclResult_t result, const std::string& message);
  // infiniCclSuccess and "" until then.
  infiniCclResult_t async_error() const { return async_error_.load(); }
  // Valid for the communicator's lifetime.
  const char* async_error_message() const;

  void Acquire() { references_.fetch_add(1); }
  void Release() {
    if (references_.fetch_sub(1) == 1) delete this;
  }

 private:
  Communicator(int world_size, int rank, std::shared_ptr<::gloo::rendezvous::Store> store,
               std::string key_prefix, CommOptions options);
  ~Communicator() = default;

  const int world_size_;
  const int rank_;
  std::shared_ptr<::gloo::rendezvous::Store> store_;  // unprefixed; split groups use it too
  const std::string key_prefix_;
  const CommOptions options_;
  std::shared_ptr<GlooContext> context_;
  uint32_t next_tag_ = 0;
  uint64_t next_split_index_ = 0;
  uint64_t next_shrink_index_ = 0;  // the same on every survivor: shrinks are collective
  std::atomic<bool> aborted_{false};
  std::atomic<bool> revoked_{false};
  mutable std::mutex async_error_mutex_;
  std::atomic<infiniCclResult_t> async_error_{infiniCclSuccess};
  std::string async_error_message_;
  std::atomic<int> references_{1};
};

inline Communicator* FromHandle(infiniCclComm_t handle) {
  return reinterpret_cast<Communicator*>(handle);
}
inline infiniCclComm_t ToHandle(Communicator* comm) {
  return reinterpret_cast<infiniCclComm_t>(comm);
}

}  // namespace infini::gloo_backend
