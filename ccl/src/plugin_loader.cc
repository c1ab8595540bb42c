#include "plugin_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "infini/ccl/error.h"

namespace infini::ccl::internal {
namespace {

namespace fs = std::filesystem;

// Bytes of a v1 table up to and including its last mandatory entry; the
// optional capture entries after it may be absent from an older plugin.
constexpr size_t kMinimumV1TableBytes = offsetof(infiniCclPlugin_v1_t, stream_begin_capture);

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

LoadedPlugin ResolveEntry(void* handle, const std::string& path) {
  dlerror();
  void* symbol = dlsym(handle, INFINI_CCL_PLUGIN_SYMBOL_V1);
  if (symbol == nullptr) {
    throw LoadError("backend plugin " + path + " does not export the symbol '" +
                    INFINI_CCL_PLUGIN_SYMBOL_V1 +
                    "' (is it an InfiniCCL plugin built against plugin_abi.h?)");
  }
  const auto* plugin = static_cast<const infiniCclPlugin_v1_t*>(symbol);
  ValidatePluginTable(*plugin, path);
  return LoadedPlugin{plugin, path};
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

void ValidatePluginTable(const infiniCclPlugin_v1_t& plugin, const std::string& library_path) {
  if (plugin.abi_version != INFINI_CCL_PLUGIN_ABI_VERSION) {
    throw LoadError("backend plugin " + library_path + " implements plugin ABI version " +
                    std::to_string(plugin.abi_version) + ", this InfiniCCL supports version " +
                    std::to_string(INFINI_CCL_PLUGIN_ABI_VERSION) +
                    " (rebuild the plugin against this InfiniCCL's plugin_abi.h)");
  }
  if (plugin.struct_size < kMinimumV1TableBytes) {
    throw LoadError("backend plugin " + library_path + " has an entry table of " +
                    std::to_string(plugin.struct_size) + " bytes, expected at least " +
                    std::to_string(kMinimumV1TableBytes) + " for ABI version 1");
  }
  struct Required {
    const char* name;
    const void* pointer;
  };
  const Required required[] = {
      {"name", reinterpret_cast<const void*>(plugin.name)},
      {"get_version", reinterpret_cast<const void*>(plugin.get_version)},
      {"get_error_string", reinterpret_cast<const void*>(plugin.get_error_string)},
      {"get_last_error", reinterpret_cast<const void*>(plugin.get_last_error)},
      {"get_device_count", reinterpret_cast<const void*>(plugin.get_device_count)},
      {"set_device", reinterpret_cast<const void*>(plugin.set_device)},
      {"get_device", reinterpret_cast<const void*>(plugin.get_device)},
      {"mem_alloc", reinterpret_cast<const void*>(plugin.mem_alloc)},
      {"mem_free", reinterpret_cast<const void*>(plugin.mem_free)},
      {"memcpy_async", reinterpret_cast<const void*>(plugin.memcpy_async)},
      {"memset_async", reinterpret_cast<const void*>(plugin.memset_async)},
      {"stream_create", reinterpret_cast<const void*>(plugin.stream_create)},
      {"stream_destroy", reinterpret_cast<const void*>(plugin.stream_destroy)},
      {"stream_synchronize", reinterpret_cast<const void*>(plugin.stream_synchronize)},
      {"stream_wait_event", reinterpret_cast<const void*>(plugin.stream_wait_event)},
      {"event_create", reinterpret_cast<const void*>(plugin.event_create)},
      {"event_destroy", reinterpret_cast<const void*>(plugin.event_destroy)},
      {"event_record", reinterpret_cast<const void*>(plugin.event_record)},
      {"event_query", reinterpret_cast<const void*>(plugin.event_query)},
      {"event_synchronize", reinterpret_cast<const void*>(plugin.event_synchronize)},
      {"event_elapsed_ms", reinterpret_cast<const void*>(plugin.event_elapsed_ms)},
      {"get_unique_id", reinterpret_cast<const void*>(plugin.get_unique_id)},
      {"comm_init_rank", reinterpret_cast<const void*>(plugin.comm_init_rank)},
      {"comm_split", reinterpret_cast<const void*>(plugin.comm_split)},
      {"comm_destroy", reinterpret_cast<const void*>(plugin.comm_destroy)},
      {"comm_abort", reinterpret_cast<const void*>(plugin.comm_abort)},
      {"comm_get_async_error", reinterpret_cast<const void*>(plugin.comm_get_async_error)},
      {"comm_count", reinterpret_cast<const void*>(plugin.comm_count)},
      {"comm_user_rank", reinterpret_cast<const void*>(plugin.comm_user_rank)},
      {"group_start", reinterpret_cast<const void*>(plugin.group_start)},
      {"group_end", reinterpret_cast<const void*>(plugin.group_end)},
      {"all_reduce", reinterpret_cast<const void*>(plugin.all_reduce)},
      {"broadcast", reinterpret_cast<const void*>(plugin.broadcast)},
      {"reduce", reinterpret_cast<const void*>(plugin.reduce)},
      {"all_gather", reinterpret_cast<const void*>(plugin.all_gather)},
      {"reduce_scatter", reinterpret_cast<const void*>(plugin.reduce_scatter)},
      {"send", reinterpret_cast<const void*>(plugin.send)},
      {"recv", reinterpret_cast<const void*>(plugin.recv)},
      {"barrier", reinterpret_cast<const void*>(plugin.barrier)},
  };
  for (const auto& entry : required) {
    if (entry.pointer == nullptr) {
      throw LoadError("backend plugin " + library_path + " leaves the required entry '" +
                      entry.name + "' of its ABI version 1 table empty");
    }
  }
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
