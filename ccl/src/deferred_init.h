// A CommInitRank issued inside GroupStart/GroupEnd: what was asked, and the
// slot the outermost GroupEnd fills. Shared by the Communicator that stands
// for the rank and the thread's open group.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "bootstrap_bridge.h"
#include "infini/ccl/ccl.h"

namespace infini::ccl::internal {

struct DeferredInit {
  DeferredInit(int world_size_, UniqueId id_, int rank_, int device_, CommConfig config_,
               std::shared_ptr<BootstrapBridge> bootstrap_)
      : world_size(world_size_),
        id(std::move(id_)),
        rank(rank_),
        device(device_),
        config(std::move(config_)),
        bootstrap(std::move(bootstrap_)) {}

  const int world_size;
  const UniqueId id;
  const int rank;
  const int device;  // current when CommInitRank was called
  const CommConfig config;
  const std::shared_ptr<BootstrapBridge> bootstrap;

  // GroupEnd's result. Returns false when the Communicator was given up
  // meanwhile: the caller then frees `made`.
  bool Fill(infiniCclComm_t made) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abandoned_) return false;
    handle_ = made;
    return true;
  }
  // Moves the made handle into `owner` (once; nothing before GroupEnd,
  // after a failure, or once abandoned). Under the lock, so that an
  // Abandon racing with it sees the handle in one place or the other.
  void MoveInto(std::atomic<infiniCclComm_t>& owner) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handle_ == nullptr || abandoned_) return;
    owner.store(handle_, std::memory_order_release);
    handle_ = nullptr;
  }
  // The Communicator is gone or destroyed: a later Fill is refused, and a
  // handle already made but not taken is returned to be freed.
  infiniCclComm_t Abandon() {
    std::lock_guard<std::mutex> lock(mutex_);
    abandoned_ = true;
    infiniCclComm_t made = handle_;
    handle_ = nullptr;
    return made;
  }

 private:
  std::mutex mutex_;
  infiniCclComm_t handle_ = nullptr;
  bool abandoned_ = false;
};

}  // namespace infini::ccl::internal
