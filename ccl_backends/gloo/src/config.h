// A communicator's options, read from an ABI v2 config: unset fields
// (INFINI_CCL_CONFIG_UNDEF_*) keep the defaults, and vendor options for
// "gloo" are applied (others' are skipped).
#pragma once

#include <chrono>
#include <string>

#include "infini/ccl/plugin_abi.h"

namespace infini::gloo_backend {

// Without config->timeout_ms: PyTorch's default for its gloo process groups.
// A peer that dies is noticed at once (its sockets close); the timeout only
// bounds waits on a peer that is alive but never joins.
inline constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::minutes(30)};

struct CommOptions {
  std::chrono::milliseconds timeout = kDefaultTimeout;
  std::string name;
  // Vendor option "socket_ifname": the interface of gloo's sockets for this
  // communicator; "" = GLOO_SOCKET_IFNAME or the host name's address.
  std::string socket_interface;
};

// The vendor options this backend knows, for messages.
inline constexpr const char* kKnownVendorOptions = "socket_ifname";

// Options from `config` (NULL: `defaults`). Throws
// PluginError(infiniCclInvalidUsage) naming the field or option, its value
// and what is expected, for a value this backend cannot honour (blocking =
// 0, timeout_ms <= 0, an unknown gloo option), and
// PluginError(infiniCclInvalidArgument) for a malformed struct.
CommOptions ReadConfig(const infiniCclConfig_t* config, const CommOptions& defaults = {});

}  // namespace infini::gloo_backend
