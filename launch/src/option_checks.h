// Checks that both halves of infini_run's command line run: the parser
// (command_line.cc) when the process count is a number, the resolver
// (resolve_options.cc) once gpu, cpu or auto became one.
#pragma once

#include <string>
#include <vector>

#include "infini/launch/options.h"

namespace infini::launch {

// "a,b,,c" -> {"a", "b", "", "c"}.
std::vector<std::string> SplitList(const std::string& text, char separator);

// A backend name or plugin path holds no blank or '='. Throws UsageError
// naming --ccl_backend (also when the name came from INFINI_CCL_BACKEND).
void CheckBackendName(const std::string& ccl_backend);

// nnodes x nproc_per_node fits an int, and every local rank that --tee,
// --redirects and --local_ranks_filter name is below nproc_per_node.
// Throws UsageError.
void CheckAgainstProcessCount(const LaunchOptions& options);

}  // namespace infini::launch
