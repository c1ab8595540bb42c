// Checks every version's reader makes of a plugin's entry table.
#pragma once

#include <initializer_list>
#include <string>

namespace infini::ccl::internal {

struct Entry {
  const char* name;
  const void* pointer;
};
template <typename Function>
Entry Named(const char* name, Function* pointer) {
  return Entry{name, reinterpret_cast<const void*>(pointer)};
}

// Throws LoadError naming the first entry that is NULL.
void RequireEntries(std::initializer_list<Entry> entries, const std::string& library_path,
                    int abi_version);
// Optional entries that only make sense together: all set or all NULL.
void RequireAllOrNone(std::initializer_list<Entry> entries, const std::string& library_path);

}  // namespace infini::ccl::internal
