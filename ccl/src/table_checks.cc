#include "table_checks.h"

#include "infini/ccl/error.h"

namespace infini::ccl::internal {

void RequireHeader(const std::string& library_path, const char* symbol, uint32_t expected_version,
                   uint32_t abi_version, size_t struct_size, size_t minimum_size) {
  const std::string expected = std::to_string(expected_version);
  if (abi_version != expected_version) {
    throw LoadError("backend plugin " + library_path + " exports '" + symbol +
                    "' with abi_version " + std::to_string(abi_version) + ", expected " + expected +
                    " (a table under the version-" + expected + " symbol must say version " +
                    expected + ")");
  }
  if (struct_size < minimum_size) {
    throw LoadError("backend plugin " + library_path + " has an entry table of " +
                    std::to_string(struct_size) + " bytes, expected at least " +
                    std::to_string(minimum_size) + " for ABI version " + expected);
  }
}

void RequireEntries(std::initializer_list<Entry> entries, const std::string& library_path,
                    int abi_version) {
  for (const Entry& entry : entries) {
    if (entry.pointer == nullptr) {
      throw LoadError("backend plugin " + library_path + " leaves the required entry '" +
                      entry.name + "' of its ABI version " + std::to_string(abi_version) +
                      " table empty");
    }
  }
}

void RequireAllOrNone(std::initializer_list<Entry> entries, const std::string& library_path) {
  size_t set = 0;
  std::string names;
  for (const Entry& entry : entries) {
    set += entry.pointer != nullptr ? 1 : 0;
    names += (names.empty() ? "" : ", ") + std::string(entry.name);
  }
  if (set != 0 && set != entries.size()) {
    throw LoadError("backend plugin " + library_path + " sets only some of the entries " + names +
                    ": expected all of them or none");
  }
}

void RequireDeclaredEntries(const infiniCclPlugin_t& table, const std::string& library_path) {
  struct Needed {
    uint64_t feature;
    const char* feature_name;
    Entry entry;
  };
  const Needed needed[] = {
      {INFINI_CCL_FEATURE_ABORT_UNBLOCKS, "INFINI_CCL_FEATURE_ABORT_UNBLOCKS",
       Named("comm_abort", table.comm_abort)},
      {INFINI_CCL_FEATURE_CONCURRENT_INIT, "INFINI_CCL_FEATURE_CONCURRENT_INIT",
       Named("comm_init_rank", table.comm_init_rank)},
  };
  for (const Needed& need : needed) {
    if ((table.features & need.feature) != 0 && need.entry.pointer == nullptr) {
      throw LoadError("backend plugin " + library_path + " declares " + need.feature_name +
                      " but leaves its entry '" + need.entry.name +
                      "' empty: expected the entry, or the feature left undeclared");
    }
  }
  constexpr uint64_t kConflicting =
      INFINI_CCL_FEATURE_CONCURRENT_INIT | INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS;
  if ((table.features & kConflicting) == kConflicting) {
    throw LoadError("backend plugin " + library_path +
                    " declares both INFINI_CCL_FEATURE_CONCURRENT_INIT (several ranks of a "
                    "process made at once) and INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS: expected "
                    "at most one of them");
  }
}

}  // namespace infini::ccl::internal
