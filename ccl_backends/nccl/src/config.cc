#include "config.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "errors.h"
#include "profiler.h"

namespace infini::ccl::nccl {
namespace {

// One integer field of ncclConfig_t that a vendor option sets. The ranges
// are the ones NCCL's own parseCommConfig accepts (or clamps to).
struct IntegerOption {
  const char* key;
  int ncclConfig_t::*field;
  int minimum;
  int maximum;
  const char* expected;
};

constexpr IntegerOption kIntegerOptions[] = {
    {"cga_cluster_size", &ncclConfig_t::cgaClusterSize, 0, 8, "an integer in [0, 8]"},
    {"min_ctas", &ncclConfig_t::minCTAs, 1, INT_MAX, "an integer >= 1"},
    {"max_ctas", &ncclConfig_t::maxCTAs, 1, INT_MAX, "an integer >= 1"},
    {"split_share", &ncclConfig_t::splitShare, 0, 1, "0 or 1"},
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 25, 0)
    {"traffic_class", &ncclConfig_t::trafficClass, 0, INT_MAX, "an integer >= 0"},
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    {"collnet_enable", &ncclConfig_t::collnetEnable, 0, 1, "0 or 1"},
    {"cta_policy", &ncclConfig_t::CTAPolicy, NCCL_CTA_POLICY_DEFAULT, NCCL_CTA_POLICY_ZERO,
     "0 (default), 1 (efficiency) or 2 (zero)"},
    {"shrink_share", &ncclConfig_t::shrinkShare, 0, 1, "0 or 1"},
    {"nvls_ctas", &ncclConfig_t::nvlsCTAs, 1, INT_MAX, "an integer >= 1"},
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    {"n_channels_per_net_peer", &ncclConfig_t::nChannelsPerNetPeer, 1, 64, "an integer in [1, 64]"},
    {"nvlink_centric_sched", &ncclConfig_t::nvlinkCentricSched, 0, 1, "0 or 1"},
#endif
};
constexpr char kNetNameKey[] = "net_name";
// NCCL's channel limit (MAXCHANNELS); it caps larger CTA counts itself.
constexpr int kMaxCtasDefault = 64;
// A chain longer than this is taken to be a cycle.
constexpr int kMaxExtensions = 64;

// Parses all of `text` as a decimal int in [minimum, maximum].
bool ParseInteger(const char* text, int minimum, int maximum, int* value) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const long parsed = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') return false;
  if (parsed < minimum || parsed > maximum) return false;
  *value = static_cast<int>(parsed);
  return true;
}

std::string Quoted(const char* text) {
  std::string quoted = "'";
  quoted.append(text == nullptr ? "(null)" : text).append("'");
  return quoted;
}

infiniCclResult_t BadOption(std::string_view call, const char* key, const char* value,
                            std::string_view expected) {
  std::string message(call);
  message.append(": vendor option nccl ")
      .append(Quoted(key))
      .append("=")
      .append(Quoted(value))
      .append(": expected ")
      .append(expected)
      .append(" (nccl keys: ")
      .append(KnownVendorKeys())
      .append(")");
  return Fail(infiniCclInvalidUsage, std::move(message));
}

infiniCclResult_t ApplyOption(std::string_view call, const char* key, const char* value,
                              CommOptions* options) {
  if (key == nullptr) return BadOption(call, key, value, "a key");
  if (std::strcmp(key, kNetNameKey) == 0) {
    if (value == nullptr || *value == '\0') {
      return BadOption(call, key, value, "the name of an NCCL network (e.g. IB, Socket)");
    }
    options->net_name = value;
    return infiniCclSuccess;
  }
  for (const IntegerOption& option : kIntegerOptions) {
    if (std::strcmp(key, option.key) != 0) continue;
    int parsed = 0;
    if (!ParseInteger(value, option.minimum, option.maximum, &parsed)) {
      return BadOption(call, key, value, option.expected);
    }
    options->nccl.*option.field = parsed;
    return infiniCclSuccess;
  }
  return BadOption(call, key, value, "a known key");
}

// NCCL refuses min_ctas > max_ctas, and compares min_ctas with an unset
// max_ctas (INT_MIN) too: give an unset max_ctas NCCL's own default.
infiniCclResult_t CheckCtaRange(std::string_view call, CommOptions* options) {
  ncclConfig_t& config = options->nccl;
  if (config.minCTAs == NCCL_CONFIG_UNDEF_INT) return infiniCclSuccess;
  if (config.maxCTAs == NCCL_CONFIG_UNDEF_INT) {
    config.maxCTAs = config.minCTAs > kMaxCtasDefault ? config.minCTAs : kMaxCtasDefault;
    return infiniCclSuccess;
  }
  if (config.minCTAs <= config.maxCTAs) return infiniCclSuccess;
  return Fail(
      infiniCclInvalidUsage,
      std::string(call) + ": vendor options nccl min_ctas=" + std::to_string(config.minCTAs) +
          " and max_ctas=" + std::to_string(config.maxCTAs) + ": expected min_ctas <= max_ctas");
}

infiniCclResult_t ApplyVendorOptions(std::string_view call, const infiniCclVendorOptions_t& vendor,
                                     CommOptions* options) {
  if (vendor.backend == nullptr || std::strcmp(vendor.backend, "nccl") != 0) {
    return infiniCclSuccess;  // another backend's options
  }
  if (vendor.count > 0 && (vendor.keys == nullptr || vendor.values == nullptr)) {
    return Fail(infiniCclInvalidArgument,
                std::string(call) +
                    ": vendor options for nccl: keys or values is NULL with count " +
                    std::to_string(vendor.count));
  }
  for (size_t index = 0; index < vendor.count; ++index) {
    CCLCHECK(ApplyOption(call, vendor.keys[index], vendor.values[index], options));
  }
  return infiniCclSuccess;
}

infiniCclResult_t WalkExtensions(std::string_view call, const infiniCclExtension_t* extension,
                                 CommOptions* options) {
  for (int seen = 0; extension != nullptr; extension = extension->next, ++seen) {
    if (seen == kMaxExtensions || extension->struct_size < sizeof(infiniCclExtension_t)) {
      return Fail(infiniCclInvalidArgument,
                  std::string(call) + ": config.extensions is malformed (" +
                      (seen == kMaxExtensions
                           ? "more than " + std::to_string(kMaxExtensions) + " extensions: a cycle?"
                           : "struct_size " + std::to_string(extension->struct_size) +
                                 " is smaller than infiniCclExtension_t") +
                      ")");
    }
    if (extension->type != infiniCclExtensionVendorOptions) continue;  // unknown: skip
    if (extension->struct_size < INFINI_CCL_STRUCT_SIZE(infiniCclVendorOptions_t, values)) {
      return Fail(infiniCclInvalidArgument,
                  std::string(call) + ": vendor options extension has struct_size " +
                      std::to_string(extension->struct_size) + ", smaller than its fields");
    }
    const auto& vendor = *reinterpret_cast<const infiniCclVendorOptions_t*>(extension);
    CCLCHECK(ApplyVendorOptions(call, vendor, options));
  }
  return infiniCclSuccess;
}

#define INFINI_CCL_HAS_FIELD(config, field) \
  ((config)->struct_size >= INFINI_CCL_STRUCT_SIZE(infiniCclConfig_t, field))

}  // namespace

std::string KnownVendorKeys() {
  std::string keys;
  for (const IntegerOption& option : kIntegerOptions) keys.append(option.key).append(", ");
  return keys.append(kNetNameKey);
}

infiniCclResult_t ReadOptions(const infiniCclConfig_t* config, std::string_view call,
                              CommOptions* options) {
  *options = CommOptions{};
  if (config == nullptr) return infiniCclSuccess;
  if (INFINI_CCL_HAS_FIELD(config, blocking) && config->blocking != INFINI_CCL_CONFIG_UNDEF_INT) {
    options->blocking = config->blocking != 0;
  }
  if (INFINI_CCL_HAS_FIELD(config, comm_name) && config->comm_name != nullptr) {
    options->name = config->comm_name;
  }
  if (INFINI_CCL_HAS_FIELD(config, allow_device_sharing) &&
      config->allow_device_sharing != INFINI_CCL_CONFIG_UNDEF_INT) {
    options->allow_device_sharing = config->allow_device_sharing != 0;
  }
  // timeout_ms: NCCL has no per-communicator timeout; stream_priority: the
  // plugin creates no stream of its own. Both are accepted and unused.
  if (INFINI_CCL_HAS_FIELD(config, extensions)) {
    CCLCHECK(WalkExtensions(call, config->extensions, options));
  }
  return CheckCtaRange(call, options);
}

#undef INFINI_CCL_HAS_FIELD

ncclConfig_t ToNcclConfig(const CommOptions& options, const std::string& name) {
  ncclConfig_t config = options.nccl;
  config.blocking = options.blocking ? 1 : 0;
  config.commName = name.empty() ? nullptr : name.c_str();
  NoteNcclCommName(name);  // NCCL's profiler init finds the communicator by it
  config.netName = options.net_name.empty() ? nullptr : options.net_name.c_str();
  return config;
}

}  // namespace infini::ccl::nccl
