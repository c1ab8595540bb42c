#include "local_init.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>

namespace infini::parallel::internal {
namespace {

struct Meeting {
  std::vector<int> ranks;
  std::vector<int> devices;
  std::map<int, ccl::Communicator> made;  // by group rank
  std::exception_ptr error;
  bool done = false;
  int collected = 0;
};

std::mutex g_mutex;
std::condition_variable g_done;
std::map<std::string, std::shared_ptr<Meeting>> g_meetings;

}  // namespace

ccl::Communicator JoinLocalInit(const std::string& key, int local_members, int group_rank,
                                int device, const InitLocalRanks& init) {
  std::unique_lock<std::mutex> lock(g_mutex);
  std::shared_ptr<Meeting>& slot = g_meetings[key];
  if (slot == nullptr) slot = std::make_shared<Meeting>();
  std::shared_ptr<Meeting> meeting = slot;
  meeting->ranks.push_back(group_rank);
  meeting->devices.push_back(device);

  if (static_cast<int>(meeting->ranks.size()) == local_members) {
    // Last to arrive: make everyone's communicator, outside the lock (init
    // blocks until the other processes' ranks join too).
    const std::vector<int> ranks = meeting->ranks;
    const std::vector<int> devices = meeting->devices;
    lock.unlock();
    std::map<int, ccl::Communicator> made;
    std::exception_ptr error;
    try {
      std::vector<ccl::Communicator> communicators = init(ranks, devices);
      for (size_t i = 0; i < communicators.size(); ++i)
        made[ranks[i]] = std::move(communicators[i]);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    meeting->made = std::move(made);
    meeting->error = error;
    meeting->done = true;
    g_done.notify_all();
  } else {
    // The watchdog bounds this wait: the caller registered its init.
    g_done.wait(lock, [&] { return meeting->done; });
  }

  if (++meeting->collected == local_members) g_meetings.erase(key);
  if (meeting->error) std::rethrow_exception(meeting->error);
  return std::move(meeting->made.at(group_rank));
}

}  // namespace infini::parallel::internal
