// What every rank thread of the suite stands on: the threads of a process
// meeting, the hang watch, and making communicators.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "suite.h"

namespace infini::conformance {

// ---- ThreadMeeting ------------------------------------------------------------

bool ThreadMeeting::Arrive(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t generation = generation_;
  if (++waiting_ == threads_) {
    waiting_ = 0;
    ++generation_;
    arrived_.notify_all();
    return true;
  }
  if (arrived_.wait_for(lock, timeout, [&] { return generation_ != generation; })) return true;
  --waiting_;
  return false;
}

ccl::Communicator ThreadMeeting::OnePerThread(
    int thread_rank, const std::function<std::vector<ccl::Communicator>()>& make,
    std::chrono::milliseconds timeout) {
  if (thread_rank == 0) {
    std::vector<ccl::Communicator> made;
    std::exception_ptr failure;
    try {
      made = make();
    } catch (...) {
      failure = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    made_ = std::move(made);
    failure_ = failure;
  }
  if (!Arrive(timeout)) {
    throw ccl::Error(infiniCclTimeout,
                     "the threads of this process did not all reach the "
                     "multi-device init within the item's timeout");
  }
  ccl::Communicator mine;
  std::exception_ptr failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failure = failure_;
    if (!failure && static_cast<size_t>(thread_rank) < made_.size()) {
      mine = std::move(made_[static_cast<size_t>(thread_rank)]);
    }
  }
  Arrive(timeout);  // every thread took its own before the next use
  if (thread_rank == 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    made_.clear();
    failure_ = nullptr;
  }
  if (failure) std::rethrow_exception(failure);
  return mine;
}

// ---- HangWatch ------------------------------------------------------------------

void HangWatch::Arm(std::chrono::steady_clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  deadline_ = deadline;
  fired_at_.reset();
}

void HangWatch::Disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  deadline_.reset();
  comms_.clear();
}

void HangWatch::Add(ccl::Communicator* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  comms_.push_back(comm);
}

void HangWatch::Remove(ccl::Communicator* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  comms_.erase(std::remove(comms_.begin(), comms_.end(), comm), comms_.end());
}

bool HangWatch::fired() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fired_at_.has_value();
}

std::chrono::milliseconds HangWatch::Check(std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!deadline_ || now < *deadline_) return std::chrono::milliseconds(0);
  if (!fired_at_) {
    fired_at_ = now;
    // Abort is safe while the rank's thread is blocked on the communicator.
    for (ccl::Communicator* comm : comms_) {
      if (comm->valid() && comm->backend()->capabilities().abort()) {
        try {
          comm->Abort();
        } catch (const std::exception&) {
          // The rank will report the hang; nothing more to do here.
        }
      }
    }
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - *fired_at_) +
         std::chrono::milliseconds(1);
}

// ---- Communicators ---------------------------------------------------------------

void RankContext::ActivateDevice() const {
  if (backend->info().device_type != kDLCPU) backend->SetDevice(device);
}

ccl::UniqueId RankContext::ShareUniqueId(const std::string& key,
                                         std::shared_ptr<ccl::BootstrapStore> bootstrap) {
  // "I<bytes>" or, when the root could not make one, "E<code> <why>", so
  // that the other ranks fail at once instead of waiting for an id.
  if (rank == 0) {
    try {
      ccl::UniqueId id = backend->GetUniqueId(std::move(bootstrap));
      store->Set(key + "/id", "I" + id.ToBytes());
      return id;
    } catch (const ccl::Error& error) {
      store->Set(key + "/id", "E" + std::to_string(error.code()) + " " + error.what());
      throw;
    }
  }
  const std::string shared = store->Get(key + "/id");
  if (!shared.empty() && shared[0] == 'I') return ccl::UniqueId::FromBytes(shared.substr(1));
  const size_t space = shared.find(' ');
  const int code = std::atoi(shared.substr(1, space).c_str());
  throw ccl::Error(static_cast<infiniCclResult_t>(code),
                   "global rank 0 could not make the unique id: " +
                       (space == std::string::npos ? shared : shared.substr(space + 1)));
}

ccl::Communicator RankContext::NewCommunicator(const std::string& key,
                                               const ccl::CommConfig& config) {
  auto bootstrap = MakeBootstrap(*run_store, key + "/bootstrap/");
  const ccl::UniqueId id = ShareUniqueId(key, bootstrap);
  return NewCommunicatorOnePerThread(key, id, config, bootstrap);
}

ccl::Communicator RankContext::NewCommunicatorOnePerThread(
    const std::string&, const ccl::UniqueId& id, const ccl::CommConfig& config,
    std::shared_ptr<ccl::BootstrapStore> bootstrap, int nranks) {
  if (nranks == 0) nranks = world_size;
  const ccl::Capabilities& caps = capabilities();
  if (caps.init_rank() && (threads == 1 || caps.concurrent_init())) {
    return backend->CommInitRank(nranks, id, rank, config, bootstrap);
  }
  // One thread makes every rank of this process (cnclInitComms-style).
  const int first_rank = rank - thread_rank;
  const int first_device = device - thread_rank;
  return meeting->OnePerThread(
      thread_rank,
      [&] {
        std::vector<int> ranks, devices;
        for (int t = 0; t < threads; ++t) {
          ranks.push_back(first_rank + t);
          devices.push_back(backend->info().device_type == kDLCPU ? 0 : first_device + t);
        }
        return backend->CommInitRanks(nranks, id, ranks, devices, config, bootstrap);
      },
      options.item_timeout);
}

}  // namespace infini::conformance
