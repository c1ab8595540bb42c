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

#include "infini/ccl/ccl.h"
#include "infini/ccl/error.h"
#include "infini/ccl/plugin_profiler_v1.h"
#include "plugin_versions.h"

namespace infini::ccl::internal {
namespace {

namespace fs = std::filesystem;

// Symbols of versions newer than this host knows, looked up only to explain
// a refusal.
constexpr int kNewestVersionProbed = 9;

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
// the current table.
LoadedPlugin ResolveEntry(void* handle, const std::string& path) {
  for (const PluginVersion& known : kPluginVersions) {
    if (const void* symbol = FindSymbol(handle, known.symbol); symbol != nullptr) {
      return LoadedPlugin{known.read(symbol, path), known.version, path,
                          FindSymbol(handle, INFINI_CCL_PROFILER_SYMBOL_V1)};
    }
  }
  const int newest_known = static_cast<int>(kPluginVersions[0].version);
  for (int version = kNewestVersionProbed; version > newest_known; --version) {
    const std::string newer = "infiniCclPlugin_v" + std::to_string(version);
    if (FindSymbol(handle, newer.c_str()) != nullptr) {
      throw LoadError("backend plugin " + path + " exports only '" + newer +
                      "' (plugin ABI version " + std::to_string(version) +
                      "); this InfiniCCL supports versions " + SupportedAbiVersions() +
                      " (upgrade InfiniCCL, or build the plugin so that it also exports " +
                      kPluginVersions[0].symbol + ")");
    }
  }
  std::string symbols;
  for (size_t i = 0; i < std::size(kPluginVersions); ++i) {
    symbols += std::string(i == 0                                ? ""
                           : i + 1 == std::size(kPluginVersions) ? " nor "
                                                                 : ", ") +
               "'" + kPluginVersions[i].symbol + "'";
  }
  throw LoadError("backend plugin " + path + " exports neither " + symbols +
                  " (is it an InfiniCCL plugin built against plugin_abi.h?)");
}

}  // namespace

}  // namespace infini::ccl::internal

namespace infini::ccl {

std::string SupportedAbiVersions() {
  // Newest first in the table; said oldest first, "1 and 2".
  std::string text;
  const size_t count = std::size(internal::kPluginVersions);
  for (size_t i = count; i-- > 0;) {
    text += (i + 1 == count ? ""
             : i == 0       ? " and "
                            : ", ") +
            std::to_string(internal::kPluginVersions[i].version);
  }
  return text;
}

}  // namespace infini::ccl

namespace infini::ccl::internal {

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
