// Runs one function per rank of a gloo group, the ranks being threads of
// this process (meeting through the plugin's private store or through a
// host bootstrap store) or child processes, and reports every rank's failure.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::gloo_test {

enum class Launch {
  kThreads,               // threads; the plugin starts its private store
  kThreadsOverBootstrap,  // threads sharing a host bootstrap (MemoryBootstrapStore)
  kProcesses,             // child processes; the plugin's private store
};
const char* LaunchName(Launch launch);

// The gloo backend (loaded once).
const std::shared_ptr<const ccl::Backend>& GlooBackend();

// A host bootstrap kept in memory, shared by the thread ranks of a test; it
// remembers every key that was set, so a test can see what the plugin used.
class MemoryBootstrapStore : public ccl::BootstrapStore {
 public:
  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::set<std::string> Keys() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

using RankBody = std::function<void(ccl::Communicator& comm)>;

// Exit status of a child process that ran its part and passed; not 0, so
// that a child that ran nothing (a filter matching no test) cannot pass.
inline constexpr int kRankPassedStatus = 42;

// Makes a unique id here, then starts `world_size` ranks that each join the
// group and run `body`. Waits for all (processes: at most `deadline_seconds`,
// then kills them). Exceptions and gtest failures inside a rank become test
// failures naming the rank.
void RunRanks(Launch launch, int world_size, const RankBody& body,
              const ccl::CommConfig& config = {}, int deadline_seconds = 120);

// Runs `body` in a new process (this test binary, filtered to the current
// test), so that nothing an earlier test did in this process is seen.
void RunInFreshProcess(const std::function<void()>& body, int deadline_seconds = 120);

}  // namespace infini::gloo_test
