// infini_run --dump_stacks[=RUN_ID]: a second infini_run asks the launcher of
// a live run on this machine for every rank's stacks (SIGUSR2, which
// `kill -USR2 <launcher pid>` sends as well); the launcher prints them and
// the run goes on.
#pragma once

#include <string>

namespace infini::launch {

// Sends SIGUSR2 to the launchers of run `run_id` (empty: the one run of this
// user with ranks here) and says so on stdout; returns 0. Throws UsageError
// when no id was given and several runs are live, LaunchError when no
// launcher of that run is found.
int RequestStacksOfLiveRuns(const std::string& run_id);

}  // namespace infini::launch
