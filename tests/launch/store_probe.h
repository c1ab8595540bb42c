// Tests that look into a run's store from outside, as another node would.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "infini/launch/run_record.h"

namespace infini::launch::testing {

// Polls the launchers' store at 127.0.0.1:`port` (with TestToken()) until
// `key` exists (true) or `bound` passes (false).
bool WaitForStoreKey(int port, const std::string& key, std::chrono::seconds bound);

// The same for the run record (run_record.h): until `holds` is true of it.
bool WaitForRecord(int port, const std::function<bool(const RunRecord&)>& holds,
                   std::chrono::seconds bound);
// Predicates for it: node rank `slot`'s ranks are done with, or its launcher
// is ready for, the record's attempt.
std::function<bool(const RunRecord&)> NodeDone(int slot);
std::function<bool(const RunRecord&)> NodeReady(int slot);

}  // namespace infini::launch::testing
