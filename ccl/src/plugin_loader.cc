#include "plugin_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "infini/ccl/error.h"
#include "plugin_adapters.h"

namespace infini::ccl::internal {
namespace {

namespace fs = std::filesystem;

// Bytes of a v1 table up to and including its last mandatory entry; the
// optional capture entries after it may be absent from an older plugin.
constexpr size_t kMinimumV1TableBytes = offsetof(infiniCclPlugin_v1_t, stream_begin_capture);
// A unique id travels through the store as one value; beyond this it is a
// corrupt table, not a real id (HCCL's, the largest known, is 4108 bytes).
constexpr size_t kMaxUniqueIdBytes = size_t{1} << 20;
// Symbols of versions newer than this host knows, looked up only to explain
// a refusal.
constexpr int kNewestVersionProbed = 9;

struct Entry {
  const char* name;
  const void* pointer;
};
template <typename Function>
Entry Named(const char* name, Function* pointer) {
  return Entry{name, reinterpret_cast<const void*>(pointer)};
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

// Optional entries that only make sense together: all set or all NULL.
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

std::vector<std::string> SplitPathList(const char* list) {
  std::vector<std::string> entries;
  if (list == nullptr) return entries;
  std::string_view rest(list);
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    std::string_view entry = rest.substr(0, colon);
    if (!entry.empty()) entries.emplace_back(entry);
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return entries;
}

std::string ExecutableLibDirectory() {
  std::error_code error;
  const fs::path executable = fs::read_symlink("/proc/self/exe", error);
  if (error) return {};
  return (executable.parent_path().parent_path() / "lib").string();
}

std::string OwnLibraryDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&PluginFileName), &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  std::error_code error;
  const fs::path library = fs::canonical(info.dli_fname, error);
  return error ? std::string{} : library.parent_path().string();
}

struct OpenAttempt {
  void* handle = nullptr;
  std::string path;
  std::string failure;  // empty when opened
  bool found = false;   // the file existed (a load failure is then fatal)
};

// Opens `path`. A bare file name goes through the system search path; dlopen
// then reports a missing file as "<name>: cannot open shared object file",
// naming the file itself (a missing dependency names the dependency).
OpenAttempt TryOpen(const std::string& path) {
  OpenAttempt attempt;
  attempt.path = path;
  const bool searched = path.find('/') == std::string::npos;
  if (!searched && !fs::exists(path)) {
    attempt.failure = "no such file";
    return attempt;
  }
  // RTLD_LOCAL: two vendors' libraries (or two builds of one) never resolve
  // each other's symbols. RTLD_NOW: a missing dependency fails here, with
  // dlerror's text, not at the first collective.
  attempt.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (attempt.handle != nullptr) {
    attempt.found = true;
    return attempt;
  }
  const char* error = dlerror();
  attempt.failure = error != nullptr ? error : "unknown dlopen error";
  attempt.found = !searched || attempt.failure.rfind(path + ":", 0) != 0;
  return attempt;
}

void* FindSymbol(void* handle, const char* symbol) {
  dlerror();
  return dlsym(handle, symbol);
}

// The newest version the library exports that this host knows, adapted to
// the newest table.
LoadedPlugin ResolveEntry(void* handle, const std::string& path) {
  if (void* symbol = FindSymbol(handle, INFINI_CCL_PLUGIN_SYMBOL_V2); symbol != nullptr) {
    const auto* table = static_cast<const infiniCclPlugin_v2_t*>(symbol);
    return LoadedPlugin{ValidateV2Table(*table, path), INFINI_CCL_PLUGIN_ABI_VERSION_V2, path};
  }
  if (void* symbol = FindSymbol(handle, INFINI_CCL_PLUGIN_SYMBOL_V1); symbol != nullptr) {
    const auto* table = static_cast<const infiniCclPlugin_v1_t*>(symbol);
    ValidateV1Table(*table, path);
    return LoadedPlugin{AdaptV1(table, path), INFINI_CCL_PLUGIN_ABI_VERSION_V1, path};
  }
  for (int version = kNewestVersionProbed; version > INFINI_CCL_PLUGIN_ABI_VERSION; --version) {
    const std::string newer = "infiniCclPlugin_v" + std::to_string(version);
    if (FindSymbol(handle, newer.c_str()) != nullptr) {
      throw LoadError("backend plugin " + path + " exports only '" + newer +
                      "' (plugin ABI version " + std::to_string(version) +
                      "); this InfiniCCL supports versions 1 and 2 (upgrade InfiniCCL, or build "
                      "the plugin so that it also exports infiniCclPlugin_v2)");
    }
  }
  throw LoadError("backend plugin " + path + " exports neither '" + INFINI_CCL_PLUGIN_SYMBOL_V2 +
                  "' nor '" + INFINI_CCL_PLUGIN_SYMBOL_V1 +
                  "' (is it an InfiniCCL plugin built against plugin_abi.h?)");
}

}  // namespace

std::string PluginFileName(std::string_view backend_name) {
  return "libinfini_ccl_" + std::string(backend_name) + ".so";
}

std::vector<std::string> PluginSearchDirectories() {
  std::vector<std::string> directories = SplitPathList(std::getenv("INFINI_CCL_PLUGIN_PATH"));
  for (std::string directory : {ExecutableLibDirectory(), OwnLibraryDirectory()}) {
    if (directory.empty()) continue;
    bool seen = false;
    for (const auto& known : directories) seen = seen || known == directory;
    if (!seen) directories.push_back(std::move(directory));
  }
  return directories;
}

void ValidateV1Table(const infiniCclPlugin_v1_t& plugin, const std::string& library_path) {
  if (plugin.abi_version != INFINI_CCL_PLUGIN_ABI_VERSION_V1) {
    throw LoadError("backend plugin " + library_path + " exports '" + INFINI_CCL_PLUGIN_SYMBOL_V1 +
                    "' with abi_version " + std::to_string(plugin.abi_version) +
                    ", expected 1 (a table under the version-1 symbol must say version 1)");
  }
  if (plugin.struct_size < kMinimumV1TableBytes) {
    throw LoadError("backend plugin " + library_path + " has an entry table of " +
                    std::to_string(plugin.struct_size) + " bytes, expected at least " +
                    std::to_string(kMinimumV1TableBytes) + " for ABI version 1");
  }
  RequireEntries({Named("name", plugin.name),
                  Named("get_version", plugin.get_version),
                  Named("get_error_string", plugin.get_error_string),
                  Named("get_last_error", plugin.get_last_error),
                  Named("get_device_count", plugin.get_device_count),
                  Named("set_device", plugin.set_device),
                  Named("get_device", plugin.get_device),
                  Named("mem_alloc", plugin.mem_alloc),
                  Named("mem_free", plugin.mem_free),
                  Named("memcpy_async", plugin.memcpy_async),
                  Named("memset_async", plugin.memset_async),
                  Named("stream_create", plugin.stream_create),
                  Named("stream_destroy", plugin.stream_destroy),
                  Named("stream_synchronize", plugin.stream_synchronize),
                  Named("stream_wait_event", plugin.stream_wait_event),
                  Named("event_create", plugin.event_create),
                  Named("event_destroy", plugin.event_destroy),
                  Named("event_record", plugin.event_record),
                  Named("event_query", plugin.event_query),
                  Named("event_synchronize", plugin.event_synchronize),
                  Named("event_elapsed_ms", plugin.event_elapsed_ms),
                  Named("get_unique_id", plugin.get_unique_id),
                  Named("comm_init_rank", plugin.comm_init_rank),
                  Named("comm_split", plugin.comm_split),
                  Named("comm_destroy", plugin.comm_destroy),
                  Named("comm_abort", plugin.comm_abort),
                  Named("comm_get_async_error", plugin.comm_get_async_error),
                  Named("comm_count", plugin.comm_count),
                  Named("comm_user_rank", plugin.comm_user_rank),
                  Named("group_start", plugin.group_start),
                  Named("group_end", plugin.group_end),
                  Named("all_reduce", plugin.all_reduce),
                  Named("broadcast", plugin.broadcast),
                  Named("reduce", plugin.reduce),
                  Named("all_gather", plugin.all_gather),
                  Named("reduce_scatter", plugin.reduce_scatter),
                  Named("send", plugin.send),
                  Named("recv", plugin.recv),
                  Named("barrier", plugin.barrier)},
                 library_path, 1);
}

const infiniCclPlugin_v2_t* ValidateV2Table(const infiniCclPlugin_v2_t& plugin,
                                            const std::string& library_path) {
  if (plugin.abi_version != INFINI_CCL_PLUGIN_ABI_VERSION_V2) {
    throw LoadError("backend plugin " + library_path + " exports '" + INFINI_CCL_PLUGIN_SYMBOL_V2 +
                    "' with abi_version " + std::to_string(plugin.abi_version) +
                    ", expected 2 (a table under the version-2 symbol must say version 2)");
  }
  if (plugin.struct_size < INFINI_CCL_PLUGIN_V2_MIN_SIZE) {
    throw LoadError("backend plugin " + library_path + " has an entry table of " +
                    std::to_string(plugin.struct_size) + " bytes, expected at least " +
                    std::to_string(INFINI_CCL_PLUGIN_V2_MIN_SIZE) + " for ABI version 2");
  }
  // Our own copy: entries past the plugin's struct_size (an older v2 header)
  // are NULL, and entries a newer header added after ours are ignored.
  auto copy = std::make_unique<infiniCclPlugin_v2_t>();
  std::memcpy(copy.get(), &plugin, std::min(plugin.struct_size, sizeof(infiniCclPlugin_v2_t)));
  const infiniCclPlugin_v2_t& table = *copy;
  RequireEntries({Named("name", table.name),
                  Named("get_version", table.get_version),
                  Named("get_error_string", table.get_error_string),
                  Named("get_last_error", table.get_last_error),
                  Named("supports", table.supports),
                  Named("device_vendor", table.device_vendor),
                  Named("device_kind", table.device_kind),
                  Named("get_device_count", table.get_device_count),
                  Named("set_device", table.set_device),
                  Named("get_device", table.get_device),
                  Named("mem_alloc", table.mem_alloc),
                  Named("mem_free", table.mem_free),
                  Named("memcpy_async", table.memcpy_async),
                  Named("memset_async", table.memset_async),
                  Named("stream_create", table.stream_create),
                  Named("stream_destroy", table.stream_destroy),
                  Named("stream_synchronize", table.stream_synchronize),
                  Named("stream_wait_event", table.stream_wait_event),
                  Named("event_create", table.event_create),
                  Named("event_destroy", table.event_destroy),
                  Named("event_record", table.event_record),
                  Named("event_query", table.event_query),
                  Named("event_synchronize", table.event_synchronize),
                  Named("event_elapsed_ms", table.event_elapsed_ms),
                  Named("get_unique_id", table.get_unique_id),
                  Named("comm_destroy", table.comm_destroy),
                  Named("comm_get_async_error", table.comm_get_async_error),
                  Named("comm_count", table.comm_count),
                  Named("comm_user_rank", table.comm_user_rank),
                  Named("all_reduce", table.all_reduce),
                  Named("broadcast", table.broadcast),
                  Named("reduce", table.reduce),
                  Named("all_gather", table.all_gather),
                  Named("reduce_scatter", table.reduce_scatter),
                  Named("send", table.send),
                  Named("recv", table.recv)},
                 library_path, 2);
  if (table.comm_init_rank == nullptr && table.comm_init_ranks == nullptr) {
    throw LoadError("backend plugin " + library_path +
                    " leaves both 'comm_init_rank' and 'comm_init_ranks' empty: expected at least "
                    "one way to create a communicator");
  }
  if (table.unique_id_bytes == 0 || table.unique_id_bytes > kMaxUniqueIdBytes) {
    throw LoadError("backend plugin " + library_path +
                    " declares unique_id_bytes=" + std::to_string(table.unique_id_bytes) +
                    ", expected 1.." + std::to_string(kMaxUniqueIdBytes));
  }
  RequireAllOrNone({Named("group_start", table.group_start), Named("group_end", table.group_end)},
                   library_path);
  RequireAllOrNone(
      {Named("stream_begin_capture", table.stream_begin_capture),
       Named("stream_end_capture", table.stream_end_capture),
       Named("graph_launch", table.graph_launch), Named("graph_destroy", table.graph_destroy)},
      library_path);
  // Kept for the life of the process, like the library itself: static
  // destructors may still call through it. Held by a never-destroyed list,
  // so it stays reachable rather than leaked.
  static std::mutex mutex;
  static auto* tables = new std::vector<std::unique_ptr<infiniCclPlugin_v2_t>>();
  std::lock_guard<std::mutex> lock(mutex);
  tables->push_back(std::move(copy));
  return tables->back().get();
}

std::vector<std::string> InstalledBackendNames() {
  constexpr std::string_view kPrefix = "libinfini_ccl_";
  constexpr std::string_view kSuffix = ".so";
  std::vector<std::string> names;
  for (const std::string& directory : PluginSearchDirectories()) {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(directory, error)) {
      const std::string file = entry.path().filename().string();
      if (file.size() <= kPrefix.size() + kSuffix.size() || file.rfind(kPrefix, 0) != 0 ||
          file.compare(file.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
        continue;
      }
      names.push_back(file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size()));
    }
  }
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    if ((a == "nccl") != (b == "nccl")) return a == "nccl";
    return a < b;
  });
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (std::find(names.begin(), names.end(), "nccl") == names.end()) {
    names.insert(names.begin(), "nccl");  // may still be on the system path
  }
  return names;
}

LoadedPlugin OpenPlugin(std::string_view name_or_path) {
  if (name_or_path.find('/') != std::string_view::npos) {
    const std::string path(name_or_path);
    OpenAttempt attempt = TryOpen(path);
    if (attempt.handle == nullptr) {
      throw LoadError("cannot load backend plugin " + path + ": " + attempt.failure);
    }
    std::error_code error;
    const fs::path canonical = fs::canonical(path, error);
    return ResolveEntry(attempt.handle, error ? path : canonical.string());
  }

  const std::string file_name = PluginFileName(name_or_path);
  std::string tried;
  for (const std::string& directory : PluginSearchDirectories()) {
    const std::string path = (fs::path(directory) / file_name).string();
    OpenAttempt attempt = TryOpen(path);
    if (attempt.handle != nullptr) return ResolveEntry(attempt.handle, path);
    // A file that exists but does not load is the answer, not a reason to
    // keep looking: loading another copy would hide the user's problem.
    if (attempt.found) {
      throw LoadError("cannot load backend plugin " + path + ": " + attempt.failure);
    }
    tried += (tried.empty() ? "" : ", ") + directory;
  }
  OpenAttempt attempt = TryOpen(file_name);
  if (attempt.handle != nullptr) return ResolveEntry(attempt.handle, file_name);
  if (attempt.found) {
    throw LoadError("cannot load backend plugin " + file_name + ": " + attempt.failure);
  }
  throw LoadError("backend '" + std::string(name_or_path) + "' not found: no " + file_name +
                  " in " + (tried.empty() ? std::string("(no directories)") : tried) +
                  " or the system library path (set INFINI_CCL_PLUGIN_PATH to the directory that "
                  "holds it)");
}

}  // namespace infini::ccl::internal
