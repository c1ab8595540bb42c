// Runs one function per rank of a gloo group, the ranks being threads of
// this process or forked child processes, and reports every rank's failure.
#pragma once

#include <functional>
#include <memory>

#include "infini/ccl/ccl.h"

namespace infini::gloo_test {

enum class Launch { kThreads, kProcesses };
const char* LaunchName(Launch launch);

// The gloo backend (loaded once).
const std::shared_ptr<const ccl::Backend>& GlooBackend();

using RankBody = std::function<void(ccl::Communicator& comm)>;

// Exit status of a rank process that ran its rank and passed; not 0, so that
// a rank process that ran nothing (a filter matching no test) cannot pass.
inline constexpr int kRankPassedStatus = 42;

// Makes a unique id here, then starts `world_size` ranks that each join the
// group and run `body`. Waits for all (processes: at most `deadline_seconds`,
// then kills them). Exceptions and gtest failures inside a rank become test
// failures naming the rank.
void RunRanks(Launch launch, int world_size, const RankBody& body,
              const ccl::CommConfig& config = {}, int deadline_seconds = 120);

}  // namespace infini::gloo_test
