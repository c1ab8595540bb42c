// Checks every version's reader makes of a plugin's entry table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::internal {

struct Entry {
  const char* name;
  const void* pointer;
};
template <typename Function>
Entry Named(const char* name, Function* pointer) {
  return Entry{name, reinterpret_cast<const void*>(pointer)};
}

// What every version's table begins with: the version it says it is (which
// must be the one its exported `symbol` names) and a size that holds its
// required entries. Throws LoadError naming the library and both figures.
void RequireHeader(const std::string& library_path, const char* symbol, uint32_t expected_version,
                   uint32_t abi_version, size_t struct_size, size_t minimum_size);

// Throws LoadError naming the first entry that is NULL.
void RequireEntries(std::initializer_list<Entry> entries, const std::string& library_path,
                    int abi_version);
// Optional entries that only make sense together: all set or all NULL.
void RequireAllOrNone(std::initializer_list<Entry> entries, const std::string& library_path);

// Features whose use needs an entry (ABORT_UNBLOCKS: comm_abort;
// CONCURRENT_INIT: comm_init_rank), and features that contradict each other
// (CONCURRENT_INIT makes several ranks of a process, ONE_RANK_PER_PROCESS
// forbids it): throws LoadError naming the feature and the entry.
void RequireDeclaredEntries(const infiniCclPlugin_t& table, const std::string& library_path);

}  // namespace infini::ccl::internal
