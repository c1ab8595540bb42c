#include "infini/parallel/work.h"

#include <algorithm>
#include <thread>

#include "infini/parallel/errors.h"
#include "work_state.h"

namespace infini::parallel {

Work::Work(std::shared_ptr<internal::WorkState> state) : state_(std::move(state)) {}

bool Work::IsCompleted() const { return state_->Poll(); }

namespace {

// Shrink mode: a work whose communicator a loss revoked did not complete.
void ThrowIfLost(internal::WorkState& state) {
  if (state.revoked_for_loss == nullptr || !*state.revoked_for_loss) return;
  throw PeerLostError(state.Describe() +
                      ": a rank of the run was lost while it ran (--on_failure=shrink); call "
                      "Context::RecoverFromLoss");
}

}  // namespace

void Work::Wait() const {
  state_->Synchronize();
  if (!state_->Poll()) Wait(std::chrono::milliseconds::max());  // not enqueued: poll
  if (auto error = state_->error()) std::rethrow_exception(error);
  ThrowIfLost(*state_);
}

bool Work::Wait(std::chrono::milliseconds timeout) const {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(10);
  while (!state_->Poll()) {
    if (timeout != std::chrono::milliseconds::max() &&
        std::chrono::steady_clock::now() - start >= timeout) {
      return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
  if (auto error = state_->error()) std::rethrow_exception(error);
  ThrowIfLost(*state_);
  return true;
}

void Work::WaitOnStream(const ccl::Stream& compute_stream) const {
  state_->MakeStreamWait(compute_stream);
}

std::exception_ptr Work::error() const { return state_->error(); }

std::string Work::Describe() const { return state_->Describe(); }

}  // namespace infini::parallel
