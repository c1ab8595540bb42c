// Which address of this host the plugin uses, both for gloo's sockets and
// for the store server that get_unique_id advertises: the interface named by
// a communicator's vendor option "socket_ifname" (gloo's sockets only), or by
// GLOO_SOCKET_IFNAME (PyTorch's variable; the first name of a comma list), or
// else the source address the kernel picks for the route to the run's master
// (MASTER_ADDR, else the launcher's store INFINI_STORE_ADDR): the interface
// that actually reaches the other hosts, whatever the host name resolves to.
// Without either, the address the host name resolves to, or 127.0.0.1 when it
// does not resolve (a single-machine setup).
//
// A loopback address chosen while the master is not a loopback address means
// the peers on other hosts could never connect back: that is refused at init
// with one line naming the address and GLOO_SOCKET_IFNAME.
#pragma once

#include <optional>
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
// value when the interface does not exist or has no address, or when the
// route to the master leaves through a loopback address.
HostAddress ChooseHostAddress(const std::string& interface_name = "",
                              const std::string& source = "");

// The address this host uses to reach `target` (numeric or a name), as the
// kernel's routing picks it (a UDP socket connected to `target`, then its
// local name); the interface that holds it, when one does. No value when
// `target` does not resolve or has no route. Exposed for tests.
std::optional<HostAddress> RouteSourceAddress(const std::string& target);

// Whether `numeric` is 127.0.0.0/8, ::1 or an IPv4-mapped 127.x address.
bool IsLoopbackAddress(const std::string& numeric);

}  // namespace infini::gloo_backend
