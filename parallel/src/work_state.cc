#include "work_state.h"

#include "flight_recorder.h"

namespace infini::parallel::internal {

WorkState::~WorkState() {
  if (pool_ == nullptr || !end_event_) return;
  try {
    // Reused only when nothing can still be waiting for it.
    if (done_ && error_ == nullptr) pool_->Return(std::move(*end_event_));
  } catch (...) {
    // The event is simply not reused.
  }
}

void WorkState::Enqueued(ccl::Event end_event, std::shared_ptr<EventPool> pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  end_event_.emplace(std::move(end_event));
  pool_ = std::move(pool);
}

void WorkState::SetDone() {
  if (!done_) {
    FlightRecorder::Instance().Update(flight_id,
                                      error_ ? FlightState::kFailed : FlightState::kDone);
  }
  done_ = true;
}

void WorkState::Failed(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  error_ = std::move(error);
  SetDone();
}

void WorkState::Complete() {
  std::lock_guard<std::mutex> lock(mutex_);
  SetDone();
}

void WorkState::Started() { FlightRecorder::Instance().Update(flight_id, FlightState::kStarted); }

bool WorkState::Poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (done_) return true;
  if (!end_event_) return false;
  try {
    if (end_event_->Query()) SetDone();
  } catch (...) {
    error_ = std::current_exception();
    SetDone();
  }
  return done_;
}

void WorkState::Synchronize() {
  const ccl::Event* event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_ || !end_event_) return;
    event = &*end_event_;  // set once, before the Work is handed out
  }
  try {
    event->Synchronize();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  SetDone();
}

std::exception_ptr WorkState::error() {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void WorkState::MakeStreamWait(const ccl::Stream& stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (end_event_) stream.WaitEvent(*end_event_);
}

std::string WorkState::Describe() const {
  if (!description.empty()) return description;
  return std::string(op) + " #" + std::to_string(sequence) + " on group '" + group + "' (" +
         std::to_string(bytes) + " bytes, global rank " + std::to_string(global_rank) + ")";
}

}  // namespace infini::parallel::internal
