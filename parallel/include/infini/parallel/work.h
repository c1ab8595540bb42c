// One operation in flight on a process group (model: c10d's Work.hpp): what
// the asynchronous forms of ProcessGroup's collectives return.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "infini/ccl/ccl.h"

namespace infini::parallel {

namespace internal {
struct WorkState;
}  // namespace internal

class Work {
 public:
  explicit Work(std::shared_ptr<internal::WorkState> state);
  // Done, or failed.
  bool IsCompleted() const;
  // Blocks the host until the operation is done; throws its error if it
  // failed. (A hung operation is the watchdog's business.)
  void Wait() const;
  // Like Wait(), but gives up after `timeout` and returns false.
  bool Wait(std::chrono::milliseconds timeout) const;
  // Makes future work on `compute_stream` wait for this operation, without
  // blocking the host.
  void WaitOnStream(const ccl::Stream& compute_stream) const;
  // The failure, or nullptr.
  std::exception_ptr error() const;
  // "all_reduce #3 on group 'world' (64 bytes, global rank 2)".
  std::string Describe() const;

 private:
  std::shared_ptr<internal::WorkState> state_;
};

}  // namespace infini::parallel
