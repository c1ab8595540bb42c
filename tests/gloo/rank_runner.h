// Runs one function per rank of a gloo group, the ranks being threads of
// this process (meeting through the plugin's private store or through a
// host bootstrap store) or child processes, and reports every rank's failure.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::gloo_test {

enum class Launch {
  kThreads,               // threads; the plugin starts its private store
  kThreadsOverBootstrap,  // threads sharing a host bootstrap (ccl::MemoryBootstrapStore)
  kProcesses,             // child processes; the plugin's private store
};
const char* LaunchName(Launch launch);

// The gloo backend (loaded once).
const std::shared_ptr<const ccl::Backend>& GlooBackend();

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

// Runs `world_size` thread ranks of the group `id` (made with `bootstrap`,
// which may be null) and waits for them.
void RunThreadRanks(int world_size, const ccl::UniqueId& id, const RankBody& body,
                    const ccl::CommConfig& config,
                    const std::shared_ptr<ccl::BootstrapStore>& bootstrap);

// Runs `body` in a new process (this test binary, filtered to the current
// test), so that nothing an earlier test did in this process is seen.
void RunInFreshProcess(const std::function<void()>& body, int deadline_seconds = 120);

}  // namespace infini::gloo_test
