// INTERNAL: the raw plugin table behind a Backend, for code that tests or
// measures the table itself (the conformance suite, the backends' tests and
// benchmarks) and for ccl/'s own sources. Frameworks use ccl.h, which does
// not include this header: the table's layout is the current ABI version's
// (a v1 plugin's is adapted to it), and the next version changes it.
#pragma once

#include "infini/ccl/ccl.h"
#include "infini/ccl/plugin_abi.h"

namespace infini::ccl {

// `backend`'s table; valid as long as the backend (plugins are never
// unloaded).
const infiniCclPlugin_t& PluginTable(const Backend& backend);

}  // namespace infini::ccl
