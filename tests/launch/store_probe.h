// Tests that look into a run's store from outside, as another node would.
#pragma once

#include <chrono>
#include <string>

namespace infini::launch::testing {

// Polls the launchers' store at 127.0.0.1:`port` (with TestToken()) until
// `key` exists (true) or `bound` passes (false).
bool WaitForStoreKey(int port, const std::string& key, std::chrono::seconds bound);

}  // namespace infini::launch::testing
