// Exceptions of the rank layer. what() is always one line that a program can
// print as it is: what was wrong, the value, and what was expected.
#pragma once

#include <stdexcept>

namespace infini::parallel {

// Base of every error this layer throws on purpose.
class ParallelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The environment or a flag describes an impossible layout: a variable that
// is not a number, a rank outside its size, products that disagree, more
// ranks on a node than visible devices.
class ParallelConfigError : public ParallelError {
 public:
  using ParallelError::ParallelError;
};

// The program used a process group wrongly: a collective on a group this rank
// is not in, or ranks calling different collectives (found in debug mode).
class ParallelUsageError : public ParallelError {
 public:
  using ParallelError::ParallelError;
};

// A collective failed, or was stopped, because a rank of the run was lost
// (infini_run --on_failure=shrink): the program calls
// Context::RecoverFromLoss and goes on with the survivors. Under restart
// mode a lost peer ends the process as before.
class PeerLostError : public ParallelError {
 public:
  using ParallelError::ParallelError;
};

}  // namespace infini::parallel
