#include "infini/parallel/work.h"

#include <algorithm>
#include <thread>

#include "work_state.h"

namespace infini::parallel {

Work::Work(std::shared_ptr<internal::WorkState> state) : state_(std::move(state)) {}

bool Work::IsCompleted() const { return state_->Poll(); }

void Work::Wait() const {
  state_->Synchronize();
  if (!state_->Poll()) Wait(std::chrono::milliseconds::max());  // not enqueued: poll
  if (auto error = state_->error()) std::rethrow_exception(error);
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
  return true;
}

void Work::WaitOnStream(const ccl::Stream& compute_stream) const {
  state_->MakeStreamWait(compute_stream);
}

std::exception_ptr Work::error() const { return state_->error(); }

std::string Work::Describe() const { return state_->Describe(); }

}  // namespace infini::parallel
