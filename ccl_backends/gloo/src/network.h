// Which address of this host the plugin uses, both for gloo's sockets and
// for the store server that get_unique_id advertises: the interface named by
// GLOO_SOCKET_IFNAME (PyTorch's variable; the first name of a comma list), or
// else the address the host name resolves to, or 127.0.0.1 when it does not
// resolve (a single-machine setup).
#pragma once

#include <string>

namespace infini::gloo_backend {

struct HostAddress {
  std::string interface_name;  // "" when chosen through the host name
  std::string numeric;         // "10.0.0.5", "fe80::1", "127.0.0.1"
  bool is_ipv6 = false;
};

// Throws PluginError(infiniCclInvalidUsage) naming GLOO_SOCKET_IFNAME and its
// value when the interface does not exist or has no address.
HostAddress ChooseHostAddress();

}  // namespace infini::gloo_backend
