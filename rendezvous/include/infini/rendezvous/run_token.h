// A run's secret: every store of a run refuses a client that cannot prove it
// knows the token (docs/rendezvous.md, "Authentication"). The launcher makes
// one per run and hands it to its ranks and nodes in INFINI_RUN_TOKEN, never on
// a command line and never in a log.
#pragma once

#include <string>

#include "infini/common/launch_env.h"

namespace infini::rendezvous {

// The variable that carries the token is env::kRunToken
// (infini/common/launch_env.h, where every launcher variable is named).

// The value of INFINI_RUN_TOKEN, or "" when it is unset (no authentication).
std::string RunTokenFromEnvironment();

// A fresh token: 32 random bytes from getrandom(2), as 64 lowercase hex digits.
// Throws StoreError when the kernel cannot give random bytes.
std::string NewRunToken();

}  // namespace infini::rendezvous
