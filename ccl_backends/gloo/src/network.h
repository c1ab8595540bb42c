// Which address of this host the plugin uses, both for gloo's sockets and
// for the store server that get_unique_id advertises: the interface named by
// a communicator's vendor option "socket_ifname" (gloo's sockets only), or by
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

// `interface_name`, when not empty, wins over GLOO_SOCKET_IFNAME (a
// communicator's vendor option; `source` names it in messages). Throws
// PluginError(infiniCclInvalidUsage) naming the variable or option and its
// value when the interface does not exist or has no address.
HostAddress ChooseHostAddress(const std::string& interface_name = "",
                              const std::string& source = "");

}  // namespace infini::gloo_backend
