// Completion events of one process group, reused: creating a device event
// per collective costs host time on every call (about 1 µs with CUDA).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::parallel::internal {

class EventPool {
 public:
  explicit EventPool(std::shared_ptr<const ccl::Backend> backend) : backend_(std::move(backend)) {}

  ccl::Event Take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        ccl::Event event = std::move(free_.back());
        free_.pop_back();
        return event;
      }
    }
    return ccl::Event(backend_);
  }

  // Only events whose recorded work is complete come back.
  void Return(ccl::Event event) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(event));
  }

 private:
  std::shared_ptr<const ccl::Backend> backend_;
  std::mutex mutex_;
  std::vector<ccl::Event> free_;
};

}  // namespace infini::parallel::internal
