#include <utility>

#include "infini/ccl/ccl.h"

namespace infini::ccl {

Communicator::Communicator(std::shared_ptr<const Backend> backend, infiniCclComm_t handle)
    : backend_(std::move(backend)), handle_(handle) {
  backend_->Check(backend_->plugin().comm_user_rank(handle, &rank_), "comm_user_rank");
  backend_->Check(backend_->plugin().comm_count(handle, &world_size_), "comm_count");
}

Communicator::~Communicator() {
  // A destructor cannot report; Destroy() is there for callers who care.
  if (infiniCclComm_t handle = handle_.exchange(nullptr); handle != nullptr) {
    backend_->plugin().comm_destroy(handle);
  }
}

Communicator::Communicator(Communicator&& other) noexcept
    : backend_(std::move(other.backend_)),
      handle_(other.handle_.exchange(nullptr)),
      rank_(std::exchange(other.rank_, -1)),
      world_size_(std::exchange(other.world_size_, 0)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    if (infiniCclComm_t handle = handle_.exchange(nullptr); handle != nullptr) {
      backend_->plugin().comm_destroy(handle);
    }
    backend_ = std::move(other.backend_);
    handle_.store(other.handle_.exchange(nullptr));
    rank_ = std::exchange(other.rank_, -1);
    world_size_ = std::exchange(other.world_size_, 0);
  }
  return *this;
}

void Communicator::Abort() {
  infiniCclComm_t handle = handle_.exchange(nullptr);
  if (handle == nullptr) return;
  backend_->Check(backend_->plugin().comm_abort(handle), "comm_abort");
}

void Communicator::Destroy() {
  infiniCclComm_t handle = handle_.exchange(nullptr);
  if (handle == nullptr) return;
  backend_->Check(backend_->plugin().comm_destroy(handle), "comm_destroy");
}

}  // namespace infini::ccl
