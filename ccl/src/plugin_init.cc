#include "plugin_init.h"

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "infini/ccl/error.h"
#include "infini/common/launch_env.h"
#include "infini/common/one_line.h"

namespace infini::ccl::internal {
namespace {

constexpr const char* kOptionsVariable = "INFINI_CCL_VENDOR_OPTIONS";

// A non-negative count or rank from the first of `names` that is set, or -1.
// The rank layer validates these variables; here they are only passed on.
int32_t FirstNumber(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') continue;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*end != '\0' || value < 0 || value > INT32_MAX) return -1;
    return static_cast<int32_t>(value);
  }
  return -1;
}

}  // namespace

std::vector<VendorOption> VendorOptionsFromEnvironment() {
  std::vector<VendorOption> options;
  const char* text = std::getenv(kOptionsVariable);
  if (text == nullptr) return options;
  std::string_view rest(text);
  while (!rest.empty()) {
    const size_t end = rest.find(';');
    const std::string_view entry = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (entry.empty()) continue;
    const size_t colon = entry.find(':');
    const size_t equals = entry.find('=');
    if (colon == 0 || colon == std::string_view::npos || equals == std::string_view::npos ||
        equals < colon + 2) {
      throw LoadError(std::string(kOptionsVariable) + ": entry '" + OneLine(entry) +
                      "' is not BACKEND:KEY=VALUE (entries are separated by ';')");
    }
    options.push_back({std::string(entry.substr(0, colon)),
                       std::string(entry.substr(colon + 1, equals - colon - 1)),
                       std::string(entry.substr(equals + 1))});
  }
  return options;
}

void InitPlugin(const infiniCclPlugin_t& plugin, const std::string& library_path,
                std::span<const VendorOption> options) {
  std::vector<VendorOption> all(options.begin(), options.end());
  for (VendorOption& option : VendorOptionsFromEnvironment()) all.push_back(std::move(option));
  if (plugin.init == nullptr) return;
  std::vector<const char*> keys, values;
  for (const VendorOption& option : all) {
    if (option.backend != plugin.name) continue;  // another backend's
    keys.push_back(option.key.c_str());
    values.push_back(option.value.c_str());
  }
  infiniCclPluginInit_t init{};
  init.struct_size = sizeof(init);
  init.option_count = keys.size();
  init.option_keys = keys.data();
  init.option_values = values.data();
  init.process_rank = FirstNumber(
      {env::infinitrain::kGlobalProcessRank, env::torchrun::kRank, "SLURM_PROCID", "PMI_RANK"});
  init.process_count = FirstNumber(
      {env::infinitrain::kProcessWorldSize, env::torchrun::kWorldSize, "SLURM_NTASKS", "PMI_SIZE"});
  init.local_process_rank = FirstNumber(
      {env::infinitrain::kLocalProcessRank, env::torchrun::kLocalRank, "SLURM_LOCALID"});
  init.local_process_count =
      FirstNumber({env::infinitrain::kProcessesPerNode, env::torchrun::kLocalWorldSize});
  const infiniCclResult_t result = plugin.init(&init);
  if (result != infiniCclSuccess) {
    const char* why = plugin.get_last_error();
    throw LoadError("backend plugin " + library_path + " refused its init entry (" +
                    std::to_string(keys.size()) + " vendor option(s)): " + ResultName(result) +
                    (why != nullptr && *why != '\0' ? std::string(": ") + why : std::string()));
  }
}

}  // namespace infini::ccl::internal
