// The launcher's store holds a connection per rank it serves; on a large run
// that is more descriptors than the usual soft limit (1,024). The launcher
// raises its own soft RLIMIT_NOFILE to the hard limit at start, as Go's
// runtime does, and gives its ranks back the limit they would have had.
#pragma once

#include <sys/resource.h>

namespace infini::launch {

// Raises the soft open-file limit to the hard one; remembers the original.
// Call once, before any thread or child starts. Returns the soft limit now in
// force.
rlim_t RaiseOpenFileLimit();

// Puts back the soft limit RaiseOpenFileLimit found: in a forked child before
// exec (async-signal-safe).
void RestoreOpenFileLimitInChild();

}  // namespace infini::launch
